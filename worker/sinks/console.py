"""Console sink: prints each batch to the worker's log (``foreachBatch``, in
the worker's own Python). At-least-once: a replayed batch is printed again."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class ConsolePrinter:
    def __init__(self, query: str) -> None:
        self.query = query

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        for row in df.toLocalIterator():
            print(f"[{self.query}] {row.asDict()}", file=sys.stderr, flush=True)
