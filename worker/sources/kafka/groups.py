"""Consumer-group offsets for Kafka's own lag tools (``kafka-consumer-groups``,
exporters): each time a checkpoint completes, the offsets where the batch it
holds ended, for each query that reads Kafka, committed to the group
``sparkpoint.<query>`` (each worker its own partitions). Spark's checkpoint
stays the truth: these offsets are never read back. Committed without
waiting, from the thread that learns of the completion; a failure is logged
and the next completion commits again.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from worker.sources.kafka.broker import client_config
from worker.sources.kafka.offsets import Offsets, from_json

log = logging.getLogger("sparkpoint.worker.kafka")


def group_of(query: str) -> str:
    return f"sparkpoint.{query}"


def batch_offsets(query_dir: Path, batch_id: int) -> Offsets | None:
    """Where batch ``batch_id`` of the query ended: the Kafka source's line of
    Spark's ``offsets/<batch>`` (a version line, the batch's metadata, then a
    line per source). None if the file or the line is not there."""
    try:
        lines = (query_dir / "offsets" / str(batch_id)).read_text().splitlines()[2:]
    except FileNotFoundError:
        return None
    for line in lines:
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
            return from_json(value)
    return None


class GroupOffsets:
    def __init__(self, config: Mapping[str, str], config_files: Mapping[str, str], queries: Mapping[str, Path]) -> None:
        """``queries``: each query that reads Kafka, and its Spark checkpoint directory."""
        self._config = client_config(config, config_files)
        self._queries = dict(queries)
        self._lock = threading.Lock()
        self._cuts: dict[int, dict[str, int]] = {}      # durable checkpoint -> its queries' batches
        self._consumers: dict[str, Any] = {}
        self._failing = False

    def durable(self, checkpoint_id: int, batches: Mapping[str, int]) -> None:
        with self._lock:
            self._cuts[checkpoint_id] = {q: b for q, b in batches.items() if q in self._queries}

    def completed(self, checkpoint_id: int) -> None:
        """Commit the newest durable cut up to ``checkpoint_id`` (completions
        subsume: an earlier one skipped changes nothing)."""
        with self._lock:
            done = [c for c in self._cuts if c <= checkpoint_id]
            if not done:
                return
            cut = self._cuts[max(done)]
            for c in done:
                del self._cuts[c]
        try:
            for query, batch_id in cut.items():
                offsets = batch_offsets(self._queries[query], batch_id)
                if offsets:
                    self._commit(query, offsets)
        except Exception as error:  # noqa: BLE001 - for monitoring only: never in the checkpoints' way
            if not self._failing:
                log.warning("cannot commit consumer-group offsets for Kafka's lag tools (%s); retrying at the "
                            "next checkpoint", error)
            self._failing = True
            return
        self._failing = False

    def _commit(self, query: str, offsets: Offsets) -> None:
        from confluent_kafka import Consumer, TopicPartition

        if query not in self._consumers:
            self._consumers[query] = Consumer({**self._config, "group.id": group_of(query),
                                               "enable.auto.commit": "false"})
        self._consumers[query].commit(offsets=[TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())],
                                      asynchronous=True)

    def close(self) -> None:
        for consumer in self._consumers.values():
            consumer.close()
        self._consumers.clear()
