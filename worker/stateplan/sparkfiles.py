"""The Spark checkpoint formats a remapped restore reads or writes.

``offsets/N`` pins the settings its query runs with for good (state
partitions, state store provider, compression codec); an empty state for a
fresh stateful node must be written with those. See docs/state-mapping.md.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from worker.stateplan.remap import EmptyState

HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
_PROVIDER = "spark.sql.streaming.stateStore.providerClass"
_CODEC = "spark.sql.streaming.stateStore.compression.codec"
_PARTITIONS = "spark.sql.shuffle.partitions"

# An empty snapshot of the HDFS-backed state store: its records (none), then
# the end marker writeInt(-1), through the lz4 codec (lz4-java's
# LZ4BlockOutputStream: "LZ4Block", a raw block of the 4 marker bytes with
# their xxHash32, then the empty end block). Written by Spark's own codec and
# loaded back by Spark 4.3 (docs/state-mapping.md, experiment d).
EMPTY_LZ4_SNAPSHOT = bytes.fromhex(
    "4c5a34426c6f636b150400000004000000db804d08ffffffff"
    "4c5a34426c6f636b15000000000000000000000000")


class UnsupportedStateStore(ValueError):
    """An empty state cannot be written for this query's pinned settings."""


def stream_metadata(query_id: str) -> bytes:
    """A query's ``metadata`` file: its id, as Spark writes it."""
    return json.dumps({"id": query_id}, separators=(",", ":")).encode()


def pinned_conf(offsets: str, source: str = "offsets") -> dict[str, str]:
    """The settings pinned in an ``offsets/N`` file: ``v1``, the batch's
    metadata (with ``conf``), then one line per source."""
    lines = offsets.splitlines()
    try:
        conf = json.loads(lines[1])["conf"]
    except (IndexError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{source}: not a Spark offsets file with pinned settings "
                         f"({type(error).__name__}: {error})") from None
    return {str(k): str(v) for k, v in conf.items()}


def empty_state_files(empty: EmptyState, conf: Mapping[str, str]) -> dict[str, bytes]:
    """The files that give ``empty``'s operator an empty state in every
    partition, as paths in its query's directory."""
    provider = conf.get(_PROVIDER, HDFS_PROVIDER)
    codec = conf.get(_CODEC, "lz4")
    if provider != HDFS_PROVIDER or codec != "lz4":
        raise UnsupportedStateStore(
            f"query {empty.query}: cannot start a new stateful node inside a query that keeps its position when it "
            f"runs with {_PROVIDER}={provider} and {_CODEC}={codec} (only the HDFS-backed store with lz4 is "
            "supported): rename the branch's sink to start the whole query fresh")
    if _PARTITIONS not in conf:
        raise UnsupportedStateStore(f"query {empty.query}: its offsets do not pin {_PARTITIONS}")
    return {f"state/{empty.operator_id}/{partition}/{empty.version}.snapshot": EMPTY_LZ4_SNAPSHOT
            for partition in range(int(conf[_PARTITIONS]))}
