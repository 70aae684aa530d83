"""Kafka record values into Arrow (``worker.sources.kafka.records``): the
pipeline's schema as the log reads it, the record's own fields on request,
and a value that is not a JSON object named by its offset."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass

import pyarrow as pa
import pytest

from worker.sources.kafka.records import Chunk, MalformedRecord, to_batch

PAYLOAD = [pa.field("id", pa.int64()), pa.field("sym", pa.string()), pa.field("time", pa.timestamp("us", tz="UTC"))]


@dataclass
class Message:
    """What the reader uses of confluent-kafka's message."""

    _value: bytes | None
    _offset: int
    _key: bytes | None
    _timestamp_ms: int

    def value(self) -> bytes | None:
        return self._value

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def timestamp(self) -> tuple[int, int]:
        return (1, self._timestamp_ms)  # TIMESTAMP_CREATE_TIME


def chunk(values: list[bytes | None], first_offset: int = 40) -> Chunk:
    """Records at every other offset from ``first_offset`` (gaps, as transaction markers leave)."""
    return Chunk("trades", 3, [Message(value, first_offset + 2 * i, f"k{i}".encode() if i % 2 == 0 else None,
                                       1_700_000_000_000 + i) for i, value in enumerate(values)])


def test_values_parse_into_the_schema_ignoring_extra_fields_and_nulling_missing_ones():
    values = [json.dumps({"id": 1, "sym": "A", "time": "2026-12-07T10:00:00.000001Z", "extra": [1]}).encode(),
              json.dumps({"id": 2}).encode()]
    batch = to_batch(chunk(values), pa.schema(PAYLOAD), ())
    assert batch.schema == pa.schema(PAYLOAD)
    assert batch.to_pylist() == [
        {"id": 1, "sym": "A", "time": dt.datetime(2026, 12, 7, 10, 0, 0, 1, tzinfo=dt.timezone.utc)},
        {"id": 2, "sym": None, "time": None}]


def test_metadata_columns_carry_each_records_key_topic_partition_offset_and_timestamp():
    schema = pa.schema(PAYLOAD + [pa.field("kafka_key", pa.string()), pa.field("kafka_topic", pa.string()),
                                  pa.field("kafka_partition", pa.int32()), pa.field("kafka_offset", pa.int64()),
                                  pa.field("kafka_timestamp", pa.timestamp("us", tz="UTC"))])
    batch = to_batch(chunk([b'{"id": 1}', b'{"id": 2}']), schema, ("key", "topic", "partition", "offset", "timestamp"))
    rows = batch.to_pylist()
    assert [(r["kafka_key"], r["kafka_topic"], r["kafka_partition"], r["kafka_offset"]) for r in rows] == \
        [("k0", "trades", 3, 40), (None, "trades", 3, 42)]
    assert rows[1]["kafka_timestamp"] == dt.datetime.fromtimestamp(1_700_000_000.001, dt.timezone.utc)


def test_tombstones_are_skipped_and_the_metadata_stays_with_its_record():
    schema = pa.schema(PAYLOAD + [pa.field("kafka_offset", pa.int64())])
    batch = to_batch(chunk([b'{"id": 1}', None, b'{"id": 3}']), schema, ("offset",))
    assert [(r["id"], r["kafka_offset"]) for r in batch.to_pylist()] == [(1, 40), (3, 44)]


def test_dates_parse_from_iso_strings_and_a_bad_one_fails_naming_the_records():
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("day", pa.date32())])
    batch = to_batch(chunk([b'{"id": 1, "day": "2026-12-07"}', b'{"id": 2}']), schema, ())
    assert batch.to_pylist() == [{"id": 1, "day": dt.date(2026, 12, 7)}, {"id": 2, "day": None}]
    with pytest.raises(MalformedRecord, match=r"offsets 40 to 40: the values do not fit the schema .*2026-13-07"):
        to_batch(chunk([b'{"id": 1, "day": "2026-13-07"}']), schema, ())


def test_a_pretty_printed_value_is_one_record():
    value = json.dumps({"id": 7, "sym": "B"}, indent=2).encode()
    assert to_batch(chunk([value, b'{"id": 8}']), pa.schema(PAYLOAD), ()).column("id").to_pylist() == [7, 8]


@pytest.mark.parametrize("bad, why", [(b"{not json", "not JSON"), (b"[1, 2]", "not a JSON object")])
def test_a_value_that_is_not_a_json_object_fails_naming_its_offset(bad, why):
    with pytest.raises(MalformedRecord, match=rf"topic 'trades' partition 3 offset 42: the value is {why}"):
        to_batch(chunk([b'{"id": 1}', bad, b'{"id": 3}']), pa.schema(PAYLOAD), ())


def test_what_the_kafka_sink_writes_the_kafka_source_reads_back_into_the_same_values():
    from worker.publishing.targets.kafka import encode, encode_key

    schema = pa.schema([pa.field("id", pa.int64()), pa.field("sym", pa.string()), pa.field("price", pa.float64()),
                        pa.field("ok", pa.bool_()), pa.field("time", pa.timestamp("us", tz="UTC")),
                        pa.field("day", pa.date32())])
    rows = [{"id": 1, "sym": "Zürich", "price": 0.1, "ok": True,
             "time": dt.datetime(2026, 12, 7, 10, 0, 0, 1, tzinfo=dt.timezone.utc), "day": dt.date(2026, 12, 7)},
            {"id": 2, "sym": None, "price": None, "ok": None, "time": None, "day": None}]
    staged = pa.Table.from_pylist(rows, schema=schema)          # as the sink reads a staged batch
    assert to_batch(chunk([encode(row) for row in staged.to_pylist()]), schema, ()).to_pylist() == rows
    assert [encode_key(v) for v in ("IBM", 7, None)] == [b"IBM", b"7", None]
