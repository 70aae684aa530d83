"""Console sink: prints each batch to the worker's log. At-least-once: a
replayed batch is printed again."""

from __future__ import annotations

import sys
from collections.abc import Iterator

from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

FORMAT = "sparkpoint_console"


class ConsoleDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def streamWriter(self, schema: StructType, overwrite: bool) -> ConsoleStreamWriter:
        return ConsoleStreamWriter(self.options.get("queryName", "console"))


class ConsoleStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, query: str) -> None:
        self.query = query

    def write(self, iterator: Iterator) -> WriterCommitMessage:
        for batch in iterator:
            for row in batch.to_pylist():
                print(f"[{self.query}] {row}", file=sys.stderr, flush=True)
        return WriterCommitMessage()
