"""A PostgreSQL table as a Spark batch source (``sparkpoint_table``), on
Spark's Python Data Source API: one partition, the table's rows in the
schema's columns, read with psycopg wherever Spark runs the read (a Python
worker), each time a plan holding it executes."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

FORMAT = "sparkpoint_table"


class PostgresTableSource(DataSource):
    """Options: ``table`` (``[schema.]name``, checked by the API) and
    ``connection`` (a file holding the libpq connection string)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def reader(self, schema: StructType) -> DataSourceReader:
        return PostgresTableReader(self.options["table"], Path(self.options["connection"]), schema)


class PostgresTableReader(DataSourceReader):
    def __init__(self, table: str, connection: Path, schema: StructType) -> None:
        self.table = table
        self.connection = connection
        self.columns = [field.name for field in schema.fields]

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition):  # type: ignore[override]
        import psycopg
        from psycopg import sql

        query = sql.SQL("SELECT {} FROM {}").format(
            sql.SQL(", ").join(map(sql.Identifier, self.columns)), sql.Identifier(*self.table.split(".")))
        with psycopg.connect(self.connection.read_text(), connect_timeout=10, application_name="sparkpoint-table",
                             autocommit=True) as conn:
            try:
                rows = conn.execute(query)
            except psycopg.errors.UndefinedTable:
                raise LookupError(f"reference table {self.table} does not exist in PostgreSQL "
                                  "(sp.read.table_from_postgres): create it") from None
            except psycopg.errors.UndefinedColumn as error:
                raise LookupError(f"reference table {self.table}: {error.diag.message_primary} "
                                  f"(the schema asks for {', '.join(self.columns)})") from None
            yield from rows
