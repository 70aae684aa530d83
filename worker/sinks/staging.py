"""Staging, the Spark side: every query but the console's ends in
``foreachBatch(BatchStager(run_dirs))``, one run directory per sink of the
query. Spark's own Parquet writer writes the batch once (no Python in the
tasks); the worker's Python, where Spark calls the function, makes it
durable and moves it into the batch's directory atomically, then links the
same files into every other sink's. The layout and the publisher's view of
it: ``worker.publishing.staging``.

Spark writes its ``commits/N`` only after ``foreachBatch`` returned for batch
N, so a checkpoint cut at batch N has every batch up to N staged durably, in
every sink of the query.

A full volume is waited out (``wait_for_space``): the batch, and so its
query, stalls until the publisher (which deletes what it published) or
checkpoint retention frees space. Failing the batch instead would fail the
query, and the worker would restart into the same full volume again and again.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from sparkpoint.backoff import Backoff
from sparkpoint.faults import NO_FAULTS, FaultInjector
from sparkpoint.fileio import fsync_dir, fsync_path
from worker.publishing.staging import batch_dir_name

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

NO_SPACE = {errno.ENOSPC, errno.EDQUOT}
# How a full volume reads in the error Spark raises for a failed write job.
NO_SPACE_TEXT = tuple(os.strerror(code) for code in NO_SPACE)
log = logging.getLogger("sparkpoint.worker.staging")
T = TypeVar("T")
WriteParquet = Callable[["DataFrame", Path], None]


def wait_for_space(attempt: Callable[[], T], what: str, *, backoff: Backoff | None = None) -> T:
    """``attempt()``, tried again with backoff for as long as it fails for
    lack of space (it must leave nothing behind when it fails); any other
    error is raised."""
    backoff = backoff or Backoff(initial_s=0.5, maximum_s=10.0)
    waited = False
    while True:
        try:
            result = attempt()
        except Exception as error:  # noqa: BLE001 - only a full volume is retried, the rest re-raised
            if not _no_space(error):
                raise
            if not waited:
                log.warning("%s: %s; waiting for space (the publisher and checkpoint retention free it)",
                            what, _reason(error))
                waited = True
            time.sleep(backoff.next_delay())
            continue
        if waited:
            log.warning("%s: space again, staged", what)
        return result


def _no_space(error: Exception) -> bool:
    if isinstance(error, OSError):
        return error.errno in NO_SPACE
    # Spark's writer fails the job with the JVM's IOException in its text.
    return any(text in str(error) for text in NO_SPACE_TEXT)


def _reason(error: Exception) -> str:
    return error.strerror if isinstance(error, OSError) and error.strerror else os.strerror(errno.ENOSPC)


def spark_parquet(df: DataFrame, path: Path) -> None:
    """Spark's built-in Parquet writer: one file per task, written by the JVM."""
    df.write.parquet(str(path))


class BatchStager:
    """The ``foreachBatch`` function of a query's staged sinks. ``run_dirs``:
    this run's staging directory of each sink (the worker creates them, on
    one volume; once retired, a lingering run stages nothing). ``write``: how
    a batch becomes Parquet files in a new directory (Spark's writer; tests
    inject their own); ``faults``: the failure point ``staging.commit``
    (tests only)."""

    def __init__(self, run_dirs: Sequence[Path], write: WriteParquet = spark_parquet,
                 faults: FaultInjector = NO_FAULTS) -> None:
        self.run_dirs = [Path(run_dir) for run_dir in run_dirs]
        self.write = write
        self.faults = faults

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """Steps:
        1. Create a temporary directory in the first sink's run directory
           (fails once the run is retired); Spark's writer writes the batch
           below it.
        2. Move the data files that hold rows into the temporary directory
           as ``0000.parquet``, ``0001.parquet``, … and fsync them (Spark's
           ``_SUCCESS``, checksums and row-less files stay behind and go);
           fsync the directory.
        3. Every other sink: hard-link those files into a temporary directory
           of its run directory, fsync it, rename it to ``b<batch>``
           (replacing an earlier attempt at this batch id) and fsync the run
           directory. The files are linked from the first sink's temporary
           directory, which no publisher sees yet (one may publish and delete
           another sink's batch as soon as it is staged).
        4. Rename the temporary directory to ``b<batch>`` likewise; fsync
           the run directory. The batch is staged for every sink (Spark runs
           it again if this fails midway).
        """
        first = self.run_dirs[0]
        what = f"staging batch {batch_id} in {first}"
        # 1.
        tmp = first / f".{batch_dir_name(batch_id)}-{uuid.uuid4().hex}.tmp"
        wait_for_space(tmp.mkdir, what)
        try:
            written = tmp / "spark"
            wait_for_space(lambda: self._write(df, written), what)
            # 2.
            for task, path in enumerate(_data_files(written)):
                target = tmp / f"{task:04d}.parquet"
                path.rename(target)
                fsync_path(target)
            shutil.rmtree(written)
            fsync_dir(tmp)
            self.faults.fail("staging.commit", f"batch {batch_id} in {first}")
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        # 3.
        for run_dir in self.run_dirs[1:]:
            linked = run_dir / f".{batch_dir_name(batch_id)}-{uuid.uuid4().hex}.tmp"
            try:
                wait_for_space(linked.mkdir, f"staging batch {batch_id} in {run_dir}")
                for path in sorted(tmp.iterdir()):
                    os.link(path, linked / path.name)
                fsync_dir(linked)
            except BaseException:
                shutil.rmtree(linked, ignore_errors=True)
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            _replace_batch(run_dir, batch_id, linked)
        # 4.
        _replace_batch(first, batch_id, tmp)

    def _write(self, df: DataFrame, path: Path) -> None:
        """One attempt; nothing of it is left behind when it fails."""
        try:
            self.write(df, path)
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise


def _replace_batch(run_dir: Path, batch_id: int, tmp: Path) -> None:
    """Rename ``tmp`` to the batch's directory (replacing an earlier
    attempt at it); fsync the run directory."""
    final = run_dir / batch_dir_name(batch_id)
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    fsync_dir(run_dir)


def _data_files(directory: Path) -> list[Path]:
    """Spark's data files with rows, in task order (its names start
    ``part-<task>``)."""
    import pyarrow.parquet as pq

    parts = sorted(p for p in directory.iterdir() if p.name.startswith("part-") and p.suffix == ".parquet")
    return [p for p in parts if pq.read_metadata(p).num_rows]

