"""A range's read (``worker.sources.kafka.fetch.read_range``) with a scripted
client: it takes only its own partition's records, each offset once, and
stops at the range's end, whatever else the client hands it (records left
from the consumer's previous assignment, a record delivered again)."""

from __future__ import annotations

import json

import pyarrow as pa

from worker.sources.kafka import fetch

SCHEMA = pa.schema([("id", pa.int64())])


class Record:
    def __init__(self, topic: str | None, partition: int | None, offset: int, value: dict | None = None,
                 error=None) -> None:
        self._topic, self._partition, self._offset, self._error = topic, partition, offset, error
        self._value = None if value is None else json.dumps(value).encode()

    def topic(self):
        return self._topic

    def partition(self):
        return self._partition

    def offset(self):
        return self._offset

    def value(self):
        return self._value

    def key(self):
        return None

    def error(self):
        return self._error


class ScriptedConsumer:
    def __init__(self, *deliveries: list[Record]) -> None:
        self.deliveries = list(deliveries)
        self.assigned: list = []

    def assign(self, partitions) -> None:
        self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in partitions]

    def unassign(self) -> None:
        self.assigned = []

    def consume(self, num_messages: int, timeout: float) -> list[Record]:
        return self.deliveries.pop(0) if self.deliveries else []


def read(consumer: ScriptedConsumer, monkeypatch, start: int, end: int) -> list[int]:
    monkeypatch.setattr(fetch, "_consumer", lambda config: consumer)
    batches = fetch.read_range({}, "trades", 1, start, end, schema=SCHEMA, metadata=(), stall_timeout_s=5)
    return [i for batch in batches for i in batch.column("id").to_pylist()]


def test_records_of_another_partition_or_delivered_again_are_not_taken(monkeypatch):
    consumer = ScriptedConsumer(
        [Record("trades", 0, 40, {"id": 900}),                 # left from the previous assignment
         Record("trades", 1, 10, {"id": 10}), Record("trades", 1, 11, {"id": 11})],
        [Record("trades", 1, 11, {"id": 11}),                  # delivered again
         Record("trades", 0, 41, {"id": 901}), Record("trades", 1, 12, {"id": 12})],
        [Record("trades", 1, 13, {"id": 13}), Record("trades", 1, 14, {"id": 14}), Record("trades", 1, 15, {"id": 15})])
    assert read(consumer, monkeypatch, 10, 15) == [10, 11, 12, 13, 14]
    assert consumer.assigned == []          # unassigned after its range


def test_an_end_of_partition_event_of_another_partition_does_not_move_the_position(monkeypatch):
    from confluent_kafka import KafkaError

    eof = KafkaError(KafkaError._PARTITION_EOF)
    consumer = ScriptedConsumer(
        [Record("trades", 0, 50, error=eof),                   # partition 0's end: not ours
         Record("trades", 1, 10, {"id": 10})],
        [Record("trades", 1, 11, {"id": 11}), Record("trades", 1, 12, error=eof)])
    assert read(consumer, monkeypatch, 10, 12) == [10, 11]
