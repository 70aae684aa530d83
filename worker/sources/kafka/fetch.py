"""A batch's task: one partition's offset range, read into Arrow batches.

Runs in Spark's Python workers. Their processes are reused across batches,
and so is the consumer this module keeps per process and configuration
(one connection per broker, not one per batch); each range assigns its
partition, reads, and unassigns.

The reader stops when its position reaches the range's end, never after
counting records: under ``read_committed`` transaction markers and aborted
records take offsets no record is delivered for.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from worker.sources.kafka.records import Chunk, to_batch

# Records per Arrow batch (and per consume call).
CHUNK_RECORDS = 20_000

_consumers: dict[tuple[tuple[str, str], ...], Any] = {}


class KafkaDataLoss(RuntimeError):
    """Records of the range are gone from Kafka (retention, a recreated topic)."""


class KafkaStalled(RuntimeError):
    """The range could not be read within the time allowed (brokers unreachable)."""


def _consumer(config: Mapping[str, str]) -> Any:
    key = tuple(sorted(config.items()))
    if key not in _consumers:
        from confluent_kafka import Consumer

        _consumers[key] = Consumer(dict(config))
    return _consumers[key]


def read_range(config: Mapping[str, str], topic: str, partition: int, start: int, end: int, *,
               schema: pa.Schema, metadata: tuple[str, ...], stall_timeout_s: float) -> Iterator[pa.RecordBatch]:
    """Records ``start`` to ``end - 1`` of ``topic``'s ``partition``.
    ``config``: the consumer's (``auto.offset.reset=error`` makes an offset
    Kafka no longer holds a KafkaDataLoss). KafkaStalled when no record
    arrives for ``stall_timeout_s``."""
    from confluent_kafka import KafkaError, TopicPartition

    consumer = _consumer(config)
    consumer.assign([TopicPartition(topic, partition, start)])
    try:
        position, last_progress = start, time.monotonic()
        chunk = Chunk(topic, partition)
        while position < end:
            messages = consumer.consume(num_messages=min(CHUNK_RECORDS, end - position), timeout=0.5)
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        # The partition's end: markers and aborted records up to it are passed.
                        position = max(position, message.offset())
                        continue
                    if error.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                        raise KafkaDataLoss(f"topic {topic!r} partition {partition}: offset {position} is no longer "
                                            f"held by Kafka (records {position} to {end - 1} were to be read): "
                                            f"{error.str()}")
                    if error.fatal():
                        raise RuntimeError(f"topic {topic!r} partition {partition}: {error.str()}")
                    continue  # transient (a broker down): librdkafka retries
                offset = message.offset()
                if offset >= end:
                    position = end
                    break
                position = offset + 1
                value = message.value()
                if value is not None:  # a tombstone carries no record
                    chunk.add(value, offset, message.key(), message.timestamp()[1])
            if messages:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > stall_timeout_s:
                raise KafkaStalled(f"topic {topic!r} partition {partition}: no record for {stall_timeout_s:.0f} s "
                                   f"at offset {position} of {start} to {end - 1} (Kafka unreachable?)")
            if len(chunk) >= CHUNK_RECORDS or (position >= end and len(chunk)):
                yield to_batch(chunk, schema, metadata)
                chunk = Chunk(topic, partition)
    finally:
        consumer.unassign()
