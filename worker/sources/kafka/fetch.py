"""A batch's task: one partition's offset range, read into Arrow batches.

Runs in Spark's Python workers. Their processes are reused across batches,
and so is the consumer this module keeps per process and configuration
(one connection per broker, not one per batch); each range assigns its
partition, reads, and unassigns: between batches nothing is fetched.
(Keeping each partition assigned across batches, as Spark's own connector
keeps its consumers, measured no faster here, and librdkafka would go on
fetching ahead while the pipeline is idle.)

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


class KafkaDataLoss(RuntimeError):
    """Records of the range are gone from Kafka (retention, a recreated topic)."""


class KafkaStalled(RuntimeError):
    """The range could not be read within the time allowed (brokers unreachable)."""


_consumers: dict[tuple[tuple[str, str], ...], Any] = {}


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
            # One pass over what the client delivered (the hot path): this partition's records at or past
            # the position, its events and client-wide ones (no partition). A record or event left from the
            # consumer's previous assignment (after a broker restart, say), or a record delivered again,
            # would move the position past records never read.
            records, events, delivered = [], [], False
            for message in consumer.consume(num_messages=min(CHUNK_RECORDS, end - position), timeout=0.5):
                if message.error() is not None:
                    if message.topic() is None or (message.partition() == partition and message.topic() == topic):
                        events.append(message)
                elif message.partition() == partition and message.topic() == topic:
                    delivered = True
                    if message.offset() >= position:
                        records.append(message)
            if events:
                position = _events(events, topic, partition, position, end, KafkaError)
            if records:
                if records[-1].offset() >= end:     # this call took records past the range
                    records = [message for message in records if message.offset() < end]
                    position = end
                else:
                    position = max(position, records[-1].offset() + 1)
                chunk.messages += records
            if delivered or events:
                last_progress = time.monotonic()
            elif time.monotonic() - last_progress > stall_timeout_s:
                raise KafkaStalled(f"topic {topic!r} partition {partition}: no record for {stall_timeout_s:.0f} s "
                                   f"at offset {position} of {start} to {end - 1} (Kafka unreachable?)")
            if len(chunk) >= CHUNK_RECORDS or (position >= end and len(chunk)):
                yield to_batch(chunk, schema, metadata)
                chunk = Chunk(topic, partition)
    finally:
        consumer.unassign()     # nothing fetched between batches: an idle trigger costs Kafka nothing


def _events(messages: list[Any], topic: str, partition: int, position: int, end: int, errors: Any) -> int:
    """The client's events among ``messages``: the partition's end moves the
    position past markers and aborted records up to it; an offset Kafka no
    longer holds is data loss; a fatal error fails the read; others are
    transient (a broker down: librdkafka retries). Returns the position."""
    for message in messages:
        error = message.error()
        if error is None:
            continue
        if error.code() == errors._PARTITION_EOF:
            position = max(position, min(message.offset(), end))
        elif error.code() in (errors._AUTO_OFFSET_RESET, errors.OFFSET_OUT_OF_RANGE):
            raise KafkaDataLoss(f"topic {topic!r} partition {partition}: offset {position} is no longer held by "
                                f"Kafka (records {position} to {end - 1} were to be read): {error.str()}")
        elif error.fatal():
            raise RuntimeError(f"topic {topic!r} partition {partition}: {error.str()}")
    return position
