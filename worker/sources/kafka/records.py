"""Kafka records into Arrow: JSON values parsed by pyarrow into the
pipeline's schema, plus the record's own fields on request.

Fields the schema lacks are ignored, missing ones are null (as with the
log); a value that is not a JSON object fails the batch, naming the record;
records without a value (tombstones) are skipped.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

# The record's own fields a source can add as columns (``metadata=``), and their types.
METADATA_TYPES = {
    "key": pa.string(),
    "topic": pa.string(),
    "partition": pa.int32(),
    "offset": pa.int64(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}
METADATA_PREFIX = "kafka_"


class MalformedRecord(ValueError):
    """A record's value is not a JSON object of the schema's fields."""


@dataclass
class Chunk:
    """Records of one partition collected for one Arrow batch: the client's
    message objects, whose fields are read only when needed (the values
    always, the rest for metadata columns or to name a malformed record)."""

    topic: str
    partition: int
    messages: list[Any] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.messages)

    @property
    def values(self) -> list[bytes]:
        return [message.value() for message in self.messages]

    @property
    def offsets(self) -> list[int]:
        return [message.offset() for message in self.messages]


def _parse(chunk: Chunk, values: list[bytes], payload: pa.Schema) -> pa.Table:
    """pyarrow's JSON reader takes dates only as numbers: a date column is
    read as a string, then cast (ISO ``YYYY-MM-DD``, as Spark writes dates)."""
    data = b"\n".join(values)
    dates = {f.name: f.type for f in payload if pa.types.is_date(f.type)}
    read = pa.schema([f.with_type(pa.string()) if f.name in dates else f for f in payload])
    options = pa_json.ParseOptions(explicit_schema=read, unexpected_field_behavior="ignore",
                                   newlines_in_values=b"\n" in data and len(values) > 1)
    try:
        table = pa_json.read_json(io.BytesIO(data), parse_options=options)
        for name, type_ in dates.items():
            table = table.set_column(table.schema.get_field_index(name), name, pc.cast(table[name], type_))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
        raise MalformedRecord(_which(chunk, str(error))) from None
    if table.num_rows != len(values):
        raise MalformedRecord(_which(chunk, f"{len(values)} values parsed into {table.num_rows} rows"))
    return table.select(payload.names)


def _which(chunk: Chunk, why: str) -> str:
    """Name the first record that is not a JSON object (slow path: only on failure)."""
    for value, offset in zip(chunk.values, chunk.offsets):
        try:
            if isinstance(json.loads(value), dict):
                continue
            reason = "not a JSON object"
        except ValueError as error:
            reason = f"not JSON ({error})"
        return f"topic {chunk.topic!r} partition {chunk.partition} offset {offset}: the value is {reason}"
    return (f"topic {chunk.topic!r} partition {chunk.partition} offsets {chunk.offsets[0]} to {chunk.offsets[-1]}: "
            f"the values do not fit the schema ({why})")


def _metadata(chunk: Chunk, name: str) -> pa.Array:
    rows = len(chunk)
    if name == "key":
        keys = (message.key() for message in chunk.messages)
        return pa.array([None if k is None else k.decode("utf-8", "replace") for k in keys], pa.string())
    if name == "topic":
        return pa.array([chunk.topic] * rows, pa.string())
    if name == "partition":
        return pa.array([chunk.partition] * rows, pa.int32())
    if name == "offset":
        return pa.array(chunk.offsets, pa.int64())
    return pa.array([message.timestamp()[1] * 1000 for message in chunk.messages], pa.timestamp("us", tz="UTC"))


def to_batch(chunk: Chunk, schema: pa.Schema, metadata: tuple[str, ...]) -> pa.RecordBatch:
    """``schema``: the source's whole output (payload fields, then
    ``kafka_<field>`` for each of ``metadata``)."""
    values = chunk.values
    if None in values:  # tombstones carry no record
        chunk = Chunk(chunk.topic, chunk.partition, [m for m, v in zip(chunk.messages, values) if v is not None])
        values = [v for v in values if v is not None]
    payload = pa.schema(list(schema)[:len(schema) - len(metadata)])
    table = _parse(chunk, values, payload)
    columns = list(table.columns) + [_metadata(chunk, name) for name in metadata]
    return pa.Table.from_arrays(columns, schema=schema).combine_chunks().to_batches()[0]
