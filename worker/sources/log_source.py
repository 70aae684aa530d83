"""The event log as a Spark streaming source (Python Data Source API).

Offsets are ``{"<partition>": byte_offset}`` over the partitions this worker
owns (partition ``p`` belongs to worker ``p % worker_count``). Spark records
each batch's end offsets in its checkpoint (``offsets/N``) before running the
batch, so a restarted query re-reads exactly the same byte ranges: the log
is replayable from any recorded offset. Records reach Spark as Arrow record
batches parsed by Arrow's JSON reader, never as per-row Python tuples.

Spark hosts one reader per query in a Python process of its own for the
query's life (``python_streaming_source_runner``) and asks it for the latest
offsets on every trigger; the reader keeps each partition's end
(``PartitionEnd``), so a trigger with nothing new costs a ``stat`` per
partition, whatever the size of the log.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

from sparkpoint.eventlog import EventLog, PartitionEnd, read_range

FORMAT = "sparkpoint_log"
SPLIT_BYTES = 8 * 1024 * 1024


def owned_partitions(partitions: int, worker_index: int, worker_count: int) -> list[int]:
    """Worker ``i`` of ``n`` owns every partition ``p`` with ``p % n == i`` (KX's scaled pipelines)."""
    return [p for p in range(partitions) if p % worker_count == worker_index]


class EventLogDataSource(DataSource):
    """Options: ``path`` (the log directory), ``workerIndex``, ``workerCount``,
    ``maxRecordsPerBatch`` (0 = no cap). The schema comes from ``.schema(...)``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        raise ValueError(f"the {FORMAT} source needs an explicit schema")

    def streamReader(self, schema: StructType) -> EventLogStreamReader:
        return EventLogStreamReader(
            Path(self.options["path"]),
            schema,
            worker_index=int(self.options.get("workerIndex", "0")),
            worker_count=int(self.options.get("workerCount", "1")),
            max_records_per_batch=int(self.options.get("maxRecordsPerBatch", "0")),
        )


class EventLogStreamReader(DataSourceStreamReader):
    def __init__(self, directory: Path, schema: StructType, *, worker_index: int, worker_count: int,
                 max_records_per_batch: int) -> None:
        self.directory = directory
        self.schema = schema
        self.max_records_per_batch = max_records_per_batch
        log = EventLog(directory)
        self.partitions_owned = owned_partitions(log.partitions(), worker_index, worker_count)
        self.paths = {str(p): str(log.path(p)) for p in self.partitions_owned}
        self.ends = {key: PartitionEnd(Path(path)) for key, path in self.paths.items()}

    def initialOffset(self) -> dict:
        return {key: 0 for key in self.paths}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_records_per_batch > 0:
            return ReadMaxRows(self.max_records_per_batch)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        if isinstance(limit, ReadMaxRows) and self.paths:
            # Split the cap across partitions; each gets at least one record.
            cap = max(1, limit.max_rows // len(self.paths))
        else:
            cap = None
        return {key: end.batch_end(int(start.get(key, 0)), cap) for key, end in self.ends.items()}

    def reportLatestOffset(self) -> dict:
        return {key: end.end() for key, end in self.ends.items()}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        """Each partition's value: the ``(path, begin, stop)`` byte ranges it reads."""
        ranges = []
        for key, path in self.paths.items():
            begin, stop = int(start.get(key, 0)), int(end.get(key, 0))
            if stop > begin:
                ranges.append((path, begin, stop))
        if sum(stop - begin for _, begin, stop in ranges) < SPLIT_BYTES:
            return [InputPartition(tuple(ranges))] if ranges else []
        return [InputPartition((byte_range,)) for byte_range in ranges]

    def read(self, partition: InputPartition) -> Iterator:
        import pyarrow.json as pa_json
        from pyspark.sql.pandas.types import to_arrow_schema

        options = pa_json.ParseOptions(explicit_schema=to_arrow_schema(self.schema, timezone="UTC"),
                                       unexpected_field_behavior="ignore")
        for path, begin, stop in partition.value:
            yield from pa_json.read_json(io.BytesIO(read_range(Path(path), begin, stop)),
                                         parse_options=options).to_batches()
