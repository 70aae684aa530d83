"""Source offsets as the protocol carries them: one flat map per query.

The log source's offsets are ``{"<partition>": <byte offset>}``; the Kafka
source's ``{"<topic>": {"<partition>": <offset>}}``, flattened here to
``"<topic>:<partition>"`` (a Kafka topic's name cannot hold ``:``), so a
query's progress and cuts name both kinds in one map.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def kafka_key(topic: str, partition: int | str) -> str:
    return f"{topic}:{partition}"


def kafka_partition(key: str) -> tuple[str, int] | None:
    """The topic and partition a key names; None for a log partition."""
    topic, colon, partition = key.rpartition(":")
    return (topic, int(partition)) if colon else None


def flatten(value: Any) -> dict[str, int]:
    """One source's offsets (parsed JSON) as a flat map; anything else: empty."""
    flat: dict[str, int] = {}
    if not isinstance(value, Mapping):
        return flat
    for key, offset in value.items():
        if isinstance(offset, int):
            flat[str(key)] = offset
        elif isinstance(offset, Mapping):
            flat.update((kafka_key(key, p), o) for p, o in offset.items() if isinstance(o, int))
    return flat
