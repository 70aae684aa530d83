"""Files sink: Parquet files published atomically when Spark commits a batch.

Each task writes its rows to a staging file (``_staging/``) and fsyncs it;
``commit(messages, batch_id)`` then renames the staged files into the output
directory as ``<worker>-b<batch>-<task>.parquet`` and fsyncs the directory.
A batch Spark re-runs after a crash (same batch id, same offsets) replaces
its earlier files rather than adding to them. In complete mode (a running
aggregate) each batch is the whole table, and older batches' files are removed
once the new one is published: the directory holds the current table.

Delivery: at-least-once across restores of older checkpoints (re-planned
batches); the exactly-once, checkpoint-published contract is the sink issue's.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

FORMAT = "sparkpoint_files"
STAGING = "_staging"


@dataclass
class StagedFile(WriterCommitMessage):
    path: str | None
    rows: int


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def batch_file_pattern(worker_id: str) -> re.Pattern[str]:
    return re.compile(rf"^{re.escape(worker_id)}-b(\d{{10}})-\d{{4}}\.parquet$")


_ANY_BATCH_FILE = re.compile(r"^(?P<worker>.+)-b(?P<batch>\d{10})-\d{4}\.parquet$")


def published_files(directory: Path) -> dict[str, dict[int, list[Path]]]:
    """Published files by worker and batch id (staging is ignored)."""
    found: dict[str, dict[int, list[Path]]] = {}
    if not Path(directory).is_dir():
        return found
    for path in sorted(Path(directory).iterdir()):
        match = _ANY_BATCH_FILE.match(path.name)
        if match:
            found.setdefault(match["worker"], {}).setdefault(int(match["batch"]), []).append(path)
    return found


def read_published(directory: Path, *, latest_batch_only: bool = False):
    """Everything published (append mode) or, with ``latest_batch_only``, each
    worker's current table (complete mode), as one Arrow table."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = []
    for batches in published_files(directory).values():
        chosen = [max(batches)] if latest_batch_only else sorted(batches)
        tables.extend(pq.read_table(path) for batch in chosen for path in batches[batch])
    return pa.concat_tables(tables) if tables else None


class FilesDataSource(DataSource):
    """Options: ``path`` (output directory), ``workerId``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def streamWriter(self, schema: StructType, overwrite: bool) -> FilesStreamWriter:
        return FilesStreamWriter(Path(self.options["path"]), self.options.get("workerId", "worker"), overwrite)


class FilesStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, directory: Path, worker_id: str, overwrite: bool) -> None:
        self.directory = directory
        self.worker_id = worker_id
        self.overwrite = overwrite

    def write(self, iterator: Iterator) -> StagedFile:
        import pyarrow as pa
        import pyarrow.parquet as pq

        batches = [batch for batch in iterator if batch.num_rows]
        if not batches:
            return StagedFile(None, 0)
        staging = self.directory / STAGING
        staging.mkdir(parents=True, exist_ok=True)
        path = staging / f"{uuid.uuid4().hex}.parquet"
        with open(path, "wb") as f:
            pq.write_table(pa.Table.from_batches(batches), f)
            f.flush()
            os.fsync(f.fileno())
        return StagedFile(str(path), sum(batch.num_rows for batch in batches))

    def commit(self, messages: list, batchId: int) -> None:
        staged = [m for m in messages if isinstance(m, StagedFile) and m.path]
        self.directory.mkdir(parents=True, exist_ok=True)
        prefix = f"{self.worker_id}-b{batchId:010d}-"
        # A re-run of this batch id replaces what an earlier run published.
        for old in self.directory.glob(f"{prefix}*.parquet"):
            old.unlink()
        for task, message in enumerate(staged):
            os.replace(message.path, self.directory / f"{prefix}{task:04d}.parquet")
        fsync_directory(self.directory)
        if self.overwrite and staged:
            pattern = batch_file_pattern(self.worker_id)
            for old in self.directory.iterdir():
                match = pattern.match(old.name)
                if match and int(match.group(1)) < batchId:
                    old.unlink()

    def abort(self, messages: list, batchId: int) -> None:
        for message in messages:
            if isinstance(message, StagedFile) and message.path:
                Path(message.path).unlink(missing_ok=True)
