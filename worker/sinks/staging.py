"""Staging, the Spark side: the sink every query but the console's writes
to. Tasks write Parquet files (fsynced) into the run's staging directory;
``commit(messages, batchId)`` (run by Spark in a Python process of its own)
moves them into the batch's directory atomically. The layout and the
publisher's view of it: ``worker.publishing.staging``.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from sparkpoint.fileio import fsync_dir
from worker.publishing.staging import batch_dir_name

FORMAT = "sparkpoint_staging"


@dataclass
class StagedFile(WriterCommitMessage):
    path: str | None
    rows: int


class StagingDataSource(DataSource):
    """Options: ``path``, this run's staging directory of the sink (it must exist)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def streamWriter(self, schema: StructType, overwrite: bool) -> StagingStreamWriter:
        return StagingStreamWriter(Path(self.options["path"]))


class StagingStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir

    def write(self, iterator: Iterator) -> StagedFile:
        import pyarrow as pa
        import pyarrow.parquet as pq

        batches = [batch for batch in iterator if batch.num_rows]
        if not batches:
            return StagedFile(None, 0)
        path = self.run_dir / f".task-{uuid.uuid4().hex}.parquet"
        with open(path, "xb") as f:
            pq.write_table(pa.Table.from_batches(batches), f)
            f.flush()
            os.fsync(f.fileno())
        return StagedFile(str(path), sum(batch.num_rows for batch in batches))

    def commit(self, messages: list, batchId: int) -> None:  # noqa: N803 - Spark's name
        """Steps:
        1. Move the tasks' files into a new temporary directory; fsync it.
        2. Rename it to ``b<batch>`` (replacing an earlier attempt at this
           batch id); fsync the run directory. The batch is now staged.
        """
        # 1.
        tmp = self.run_dir / f".{batch_dir_name(batchId)}-{uuid.uuid4().hex}.tmp"
        tmp.mkdir()     # fails once the run is retired: a lingering run stages nothing
        staged = [m for m in messages if isinstance(m, StagedFile) and m.path]
        for task, message in enumerate(staged):
            os.replace(message.path, tmp / f"{task:04d}.parquet")
        fsync_dir(tmp)
        # 2.
        final = self.run_dir / batch_dir_name(batchId)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        fsync_dir(self.run_dir)

    def abort(self, messages: list, batchId: int) -> None:  # noqa: N803
        for message in messages:
            if isinstance(message, StagedFile) and message.path:
                Path(message.path).unlink(missing_ok=True)
