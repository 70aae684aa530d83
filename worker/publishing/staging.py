"""Staging, as the publisher sees it: every batch a sink writes is first
made durable on the worker's volume, and published to its target later by
the worker's publisher (the Spark side that writes it: ``worker.sinks.staging``).

Layout, under ``SP_CHECKPOINT_DIR/staging/<sink>/`` (fenced by the store's LOCK)::

    run-<ms>-<pid>/                 this worker run's staging directory
        .task-<uuid>.parquet        a task's rows (fsynced), until its batch commits
        b0000000042/0000.parquet    batch 42, committed: one file per task with rows
    .retired-run-.../               an earlier run's, being emptied at start-up

Spark's tasks write the task files; ``commit(messages, batchId)`` (run by
Spark in a Python process of its own) moves them into ``b<batch>`` atomically.
Spark writes its ``commits/N`` only after the sink's commit(N) returned, so a
checkpoint cut at batch N has every batch up to N staged durably.

A run never creates its staging directory: the worker does at start-up, after
retiring the earlier runs' directories (``StagingArea.recover``). A killed
run's lingering Spark process therefore cannot commit into staging any more.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from sparkpoint.fileio import fsync_dir

_BATCH_DIR = re.compile(r"^b(\d{10})$")
_RETIRED = ".retired-"


def batch_dir_name(batch_id: int) -> str:
    return f"b{batch_id:010d}"


@dataclass(frozen=True)
class StagedBatch:
    batch_id: int
    files: tuple[Path, ...]     # one per task that had rows, in task order

    def read(self):
        """The batch's rows as one Arrow table; None if it has none."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        tables = [pq.read_table(path) for path in self.files]
        return pa.concat_tables(tables) if tables else None


class StagingArea:
    """One sink's staging directory, as the publisher (worker process) sees it."""

    def __init__(self, root: Path, run: str) -> None:
        self.root = Path(root)
        self.run_dir = self.root / run

    def recover(self, keep_through: int | None) -> int:
        """Start-up: keep earlier runs' batches up to ``keep_through`` (the
        restored checkpoint's batch: output up to it is published later), forget
        those after it (StreamInsight: output forgets after the checkpoint).
        ``None``: nothing was restored; forget everything. Returns how many were kept.

        Steps:
        1. Retire every earlier run's directory (rename): the fence against a
           killed run's lingering Spark process.
        2. Move retired batches up to ``keep_through`` into this run's directory,
           older runs first (a batch staged again by a newer run wins).
        3. Delete the retired directories, with whatever else they hold.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        # 1.
        for entry in sorted(self.root.iterdir()):
            if entry.is_dir() and entry != self.run_dir and not entry.name.startswith(_RETIRED):
                entry.rename(self.root / f"{_RETIRED}{entry.name}")
        fsync_dir(self.root)
        self.run_dir.mkdir(exist_ok=True)
        # 2.
        retired = sorted(d for d in self.root.iterdir() if d.name.startswith(_RETIRED))
        kept = set()
        for directory in retired:
            for batch_id, path in _batch_dirs(directory):
                if keep_through is None or batch_id > keep_through:
                    continue
                target = self.run_dir / path.name
                if target.exists():
                    shutil.rmtree(target)
                path.rename(target)
                kept.add(batch_id)
        fsync_dir(self.run_dir)
        # 3.
        for directory in retired:
            shutil.rmtree(directory)
        fsync_dir(self.root)
        return len(kept)

    def batches(self) -> list[int]:
        return sorted(batch_id for batch_id, _ in _batch_dirs(self.run_dir))

    def batch(self, batch_id: int) -> StagedBatch:
        directory = self.run_dir / batch_dir_name(batch_id)
        return StagedBatch(batch_id, tuple(sorted(directory.glob("*.parquet"))))

    def discard(self, batch_ids: Iterable[int]) -> None:
        for batch_id in batch_ids:
            shutil.rmtree(self.run_dir / batch_dir_name(batch_id), ignore_errors=True)


def _batch_dirs(directory: Path) -> Iterator[tuple[int, Path]]:
    if not directory.is_dir():
        return
    for entry in directory.iterdir():
        match = _BATCH_DIR.match(entry.name)
        if match and entry.is_dir():
            yield int(match.group(1)), entry
