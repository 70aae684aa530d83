"""Reference tables a stream is joined with (``sp.read.table_from_postgres``):
a static side Spark reads again at every micro-batch.

A stream-static join plans its static side into every batch, so the table
is queried each batch (Spark's rule, nothing cached): a row updated in the
table is seen by the next batch. The read is a batch source on Spark's
Python Data Source API (``sparkpoint_table``) over psycopg; it runs in
Spark's Python workers, which read the connection (secrets included) from
a file only the worker can read, never from the plan.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from sparkpoint.fileio import atomic_write
from worker.sources.tables.datasource import FORMAT, PostgresTableSource


def connection_file(work_dir: Path, conninfo: str) -> Path:
    """The worker's PostgreSQL connection, written for its Python workers
    (mode 0600, as ``atomic_write`` creates files, in its own work directory)."""
    path = work_dir / "reference-tables.conninfo"
    atomic_write(path, conninfo.encode())
    return path


def read_table(spark: SparkSession, table: str, schema: str, connection: Path) -> DataFrame:
    """The PostgreSQL table ``table``'s columns in ``schema`` (a Spark DDL
    string), read at every execution of a plan that holds it."""
    spark.dataSource.register(PostgresTableSource)
    return spark.read.format(FORMAT).schema(schema).options(table=table, connection=str(connection)).load()
