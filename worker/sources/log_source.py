"""The event log as a Spark streaming source.

The source runs in the worker's JVM (``jvm/sparkpoint/eventlog/``, in the
jar ``make jars`` builds): offsets are ``{"<partition>": byte_offset}`` over
the partitions this worker owns (partition ``p`` belongs to worker
``p % worker_count``), each partition's end is kept across triggers (a
trigger with nothing new costs a ``stat`` per partition, whatever the size
of the log), and its tasks parse their byte ranges with Spark's own JSON
parser into the pipeline's schema. Spark records each batch's end offsets
in its checkpoint (``offsets/N``) before running the batch, so a restarted
query re-reads exactly the same byte ranges. No Python runs in a batch's
tasks, and a query's start needs no Python process of Spark's.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

FORMAT = "sparkpoint.eventlog.EventLogProvider"


def owned_partitions(partitions: int, worker_index: int, worker_count: int) -> list[int]:
    """Worker ``i`` of ``n`` owns every partition ``p`` with ``p % n == i`` (KX's scaled pipelines)."""
    return [p for p in range(partitions) if p % worker_count == worker_index]


def read_log(spark: SparkSession, directory: Path, schema: StructType | str, *, worker_index: int = 0,
             worker_count: int = 1, max_records_per_batch: int = 0) -> DataFrame:
    """A streaming DataFrame of the log's records with ``schema`` (a
    ``StructType`` or a DDL string): fields the schema lacks are ignored,
    missing ones are null, and a malformed record fails the batch instead of
    becoming a row of nulls. ``max_records_per_batch``: 0 = no cap."""
    return (
        spark.readStream.format(FORMAT)
        .schema(schema)
        .option("path", str(directory))
        .option("workerIndex", worker_index)
        .option("workerCount", worker_count)
        .option("maxRecordsPerBatch", max_records_per_batch)
        .load()
    )
