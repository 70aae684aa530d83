"""Staging, the Spark side: the sink every query but the console's writes
to. Tasks write Parquet files (fsynced) into the run's staging directory;
``commit(messages, batchId)`` (run by Spark in a Python process of its own)
moves them into the batch's directory atomically. The layout and the
publisher's view of it: ``worker.publishing.staging``.

A full volume is waited out (``wait_for_space``): the batch, and so its
query, stalls until the publisher (which deletes what it published) or
checkpoint retention frees space. Failing the task instead would fail the
query, and the worker would exit and restart into the same full volume
again and again.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from sparkpoint.backoff import Backoff
from sparkpoint.faults import NO_FAULTS, FaultInjector
from sparkpoint.fileio import fsync_dir
from worker.publishing.staging import batch_dir_name

FORMAT = "sparkpoint_staging"
NO_SPACE = {errno.ENOSPC, errno.EDQUOT}
log = logging.getLogger("sparkpoint.worker.staging")
T = TypeVar("T")


def wait_for_space(attempt: Callable[[], T], what: str, *, backoff: Backoff | None = None) -> T:
    """``attempt()``, tried again with backoff for as long as it fails for
    lack of space (it must leave nothing behind when it fails); any other
    error is raised."""
    backoff = backoff or Backoff(initial_s=0.5, maximum_s=10.0)
    waited = False
    while True:
        try:
            result = attempt()
        except OSError as error:
            if error.errno not in NO_SPACE:
                raise
            if not waited:
                log.warning("%s: %s; waiting for space (the publisher and checkpoint retention free it)",
                            what, error.strerror)
                waited = True
            time.sleep(backoff.next_delay())
            continue
        if waited:
            log.warning("%s: space again, staged", what)
        return result


@dataclass
class StagedFile(WriterCommitMessage):
    path: str | None
    rows: int


class StagingDataSource(DataSource):
    """Options: ``path``, this run's staging directory of the sink (it must
    exist); tests only: ``testFault`` and ``faultDir`` (``sparkpoint.faults``)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def streamWriter(self, schema: StructType, overwrite: bool) -> StagingStreamWriter:
        spec = self.options.get("testFault", "")
        faults = FaultInjector(spec, Path(self.options["faultDir"])) if spec else NO_FAULTS
        return StagingStreamWriter(Path(self.options["path"]), faults)


class StagingStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, run_dir: Path, faults: FaultInjector = NO_FAULTS) -> None:
        self.run_dir = run_dir
        self.faults = faults

    def write(self, iterator: Iterator) -> StagedFile:
        import pyarrow as pa
        import pyarrow.parquet as pq

        batches = [batch for batch in iterator if batch.num_rows]
        if not batches:
            return StagedFile(None, 0)
        table = pa.Table.from_batches(batches)

        def write_file() -> Path:
            path = self.run_dir / f".task-{uuid.uuid4().hex}.parquet"
            try:
                with open(path, "xb") as f:
                    pq.write_table(table, f)
                    f.flush()
                    os.fsync(f.fileno())
            except BaseException:
                path.unlink(missing_ok=True)
                raise
            return path

        path = wait_for_space(write_file, f"staging in {self.run_dir}")
        return StagedFile(str(path), table.num_rows)

    def commit(self, messages: list, batchId: int) -> None:  # noqa: N803 - Spark's name
        """Steps:
        1. Move the tasks' files into a new temporary directory; fsync it.
        2. Rename it to ``b<batch>`` (replacing an earlier attempt at this
           batch id); fsync the run directory. The batch is now staged.
        """
        self.faults.fail("staging.commit", f"batch {batchId} of {self.run_dir.name}")
        # 1.
        tmp = self.run_dir / f".{batch_dir_name(batchId)}-{uuid.uuid4().hex}.tmp"
        # Fails once the run is retired: a lingering run stages nothing.
        wait_for_space(tmp.mkdir, f"staging batch {batchId} in {self.run_dir}")
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
