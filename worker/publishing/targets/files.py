"""Files target: Parquet files under ``SP_OUTPUT_DIR/<directory>``, published
from staging by the worker's publisher, with a mark per worker::

    <worker>-b<batch>-<task>.parquet    a published batch's rows, one file per task
    _published/<worker>.json           the mark: {"checkpoint_id": k, "batch_id": b,
                                       "fence": [volume id, generation]}

The mark is the commit point: a reader sees each worker's files up to its
mark's batch only (complete mode: the newest such batch, the worker's current
table), so files placed by a publish that a crash interrupted before its mark
are invisible, and removed when the worker resumes. The mark carries the
fence of the worker's checkpoint volume (the index's epoch) as the process
that last resumed or published held it: a process holding an earlier
generation -- paused while another took its index over -- is refused
(``Fenced``) before it places a file.

Contract: transactional, published when a checkpoint completes (with
``SP_CHECKPOINT_FREQ=0``: published per batch, at-least-once across restarts).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path

from sparkpoint.faults import NO_FAULTS, FaultInjector
from sparkpoint.fileio import atomic_write, fsync_dir
from sparkpoint.messages import VolumeFence
from worker.publishing.book import Mark
from worker.publishing.staging import StagedBatch
from worker.publishing.targets import Outcome, check_fence

MARKS = "_published"
_BATCH_FILE = re.compile(r"^(?P<worker>.+)-b(?P<batch>\d{10})-\d{4}\.parquet$")


def batch_file_name(worker_id: str, batch_id: int, task: int) -> str:
    return f"{worker_id}-b{batch_id:010d}-{task:04d}.parquet"


def read_mark(directory: Path, worker_id: str) -> Mark | None:
    return read_fenced_mark(directory, worker_id)[0]


def read_fenced_mark(directory: Path, worker_id: str) -> tuple[Mark | None, VolumeFence]:
    """The worker's mark and the fence it carries (none: a mark from before
    fences, or no mark)."""
    try:
        data = json.loads((Path(directory) / MARKS / f"{worker_id}.json").read_text())
    except FileNotFoundError:
        return None, VolumeFence()
    volume_id, generation = data.get("fence", ("", 0))
    return Mark(int(data["checkpoint_id"]), int(data["batch_id"])), VolumeFence(str(volume_id), int(generation))


def batch_files(directory: Path) -> dict[str, dict[int, list[Path]]]:
    """Every batch file present, published or not, by worker and batch id."""
    found: dict[str, dict[int, list[Path]]] = {}
    if not Path(directory).is_dir():
        return found
    for path in sorted(Path(directory).iterdir()):
        match = _BATCH_FILE.match(path.name)
        if match:
            found.setdefault(match["worker"], {}).setdefault(int(match["batch"]), []).append(path)
    return found


def published_files(directory: Path, *, latest_batch_only: bool = False) -> dict[str, dict[int, list[Path]]]:
    """The files readers see, by worker and batch: up to each worker's mark
    (the mark is read before the files are listed, so a publish running
    meanwhile cannot show half a batch)."""
    marks_dir = Path(directory) / MARKS
    workers = [p.stem for p in marks_dir.glob("*.json")] if marks_dir.is_dir() else []
    marks = {worker: read_mark(directory, worker) for worker in workers}
    visible: dict[str, dict[int, list[Path]]] = {}
    for worker, batches in batch_files(directory).items():
        mark = marks.get(worker)
        chosen = sorted(b for b in batches if mark is not None and b <= mark.batch_id)
        if latest_batch_only:
            chosen = chosen[-1:]
        if chosen:
            visible[worker] = {b: batches[b] for b in chosen}
    return visible


def read_published(directory: Path, *, latest_batch_only: bool = False):
    """Everything published (append mode) or, with ``latest_batch_only``, each
    worker's current table (complete mode), as one Arrow table; None if empty."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = [pq.read_table(path)
              for batches in published_files(directory, latest_batch_only=latest_batch_only).values()
              for paths in batches.values() for path in paths]
    return pa.concat_tables(tables) if tables else None


class FilesTarget:
    def __init__(self, directory: Path, worker_id: str, *, complete: bool, fence: VolumeFence = VolumeFence(),
                 faults: FaultInjector = NO_FAULTS) -> None:
        """``fence``: this process's of the worker's checkpoint volume."""
        self.directory = Path(directory)
        self.worker_id = worker_id
        self.complete = complete
        self.description = f"files {self.directory}"
        self._fence = fence
        self._faults = faults

    def _checked_mark(self) -> tuple[Mark | None, VolumeFence]:
        """The mark and its fence; ``Fenced`` if that supersedes this process's."""
        mark, fence = read_fenced_mark(self.directory, self.worker_id)
        check_fence(fence, self._fence, self.description)
        return mark, fence

    def resume(self) -> Mark | None:
        """The mark, claimed for this process's fence; and the clean-up of
        what an interrupted publish left: this worker's files past the mark
        (placed, never published), temporary files, and in complete mode
        tables older than the published one."""
        mark, fence = self._checked_mark()
        if mark is not None and fence != self._fence:
            self._write_mark(mark)
        published = mark.batch_id if mark else -1
        for batch_id, paths in batch_files(self.directory).get(self.worker_id, {}).items():
            if batch_id > published:
                for path in paths:
                    path.unlink(missing_ok=True)
        if self.complete:
            self._remove_older_tables(published)
        for stray in self.directory.glob(f".{self.worker_id}-*.tmp") if self.directory.is_dir() else []:
            stray.unlink(missing_ok=True)
        return mark

    def rewind(self, mark: Mark) -> None:
        """The older mark, then ``resume``'s clean-up: this worker's files past
        it are removed (readers never see them twice)."""
        self._write_mark(mark)
        self.resume()

    def _write_mark(self, mark: Mark) -> None:
        atomic_write(self.directory / MARKS / f"{self.worker_id}.json",
                     json.dumps({"checkpoint_id": mark.checkpoint_id, "batch_id": mark.batch_id,
                                 "fence": [self._fence.volume_id, self._fence.generation]}).encode())

    def publish(self, batches: Sequence[StagedBatch], mark: Mark) -> Outcome:
        """Steps:
        0. Read the mark: if a later holder of the index claimed it, place
           nothing (``Fenced``).
        1. Place each batch's files as ``<worker>-b<batch>-<task>.parquet``,
           replacing earlier files of that batch: a hard link to the staged file
           (a copy across filesystems) under a temporary name, renamed into place.
           Staging keeps its files until the mark is written: a crash here
           publishes the same batches again.
        2. fsync the directory.
        3. Write the mark atomically: the commit point.
        4. Complete mode: remove this worker's older tables.
        """
        # 0.
        self._checked_mark()
        self.directory.mkdir(parents=True, exist_ok=True)
        # 1.
        mine = batch_files(self.directory).get(self.worker_id, {})
        for batch in batches:
            for old in mine.get(batch.batch_id, []):
                old.unlink()
            for task, source in enumerate(batch.files):
                self._place(source, self.directory / batch_file_name(self.worker_id, batch.batch_id, task))
        # 2.
        fsync_dir(self.directory)
        self._faults.hit("publish.files_placed")
        # 3.
        self._write_mark(mark)
        # 4.
        if self.complete:
            self._remove_older_tables(mark.batch_id)
        return Outcome.PUBLISHED

    def _remove_older_tables(self, published: int) -> None:
        """Complete mode: keep this worker's newest table up to ``published``
        (readers see that one), remove the older ones."""
        mine = batch_files(self.directory).get(self.worker_id, {})
        current = max((b for b in mine if b <= published), default=None)
        for batch_id, paths in mine.items():
            if current is not None and batch_id < current:
                for path in paths:
                    path.unlink(missing_ok=True)

    def _place(self, source: Path, final: Path) -> None:
        tmp = self.directory / f".{self.worker_id}-{uuid.uuid4().hex}.tmp"
        try:
            os.link(source, tmp)
        except OSError:
            # Another filesystem (the output and checkpoint volumes differ): copy.
            with open(source, "rb") as src, open(tmp, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
                dst.flush()
                os.fsync(dst.fileno())
        os.replace(tmp, final)

    def close(self) -> None:
        pass
