"""Issue 15's full checkpoint volume as regression tests (no Spark): a
checkpoint that does not fit frees space by retention before it gives up,
what cannot be freed fails visibly (counted, the error in /status with the
volume's bytes used and free), and staging waits for space instead of
failing its task (which failed the query, so the worker exited and came
back to the same full volume, again and again)."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest

from sparkpoint.backoff import Backoff
from sparkpoint.messages import ProgressReport, VolumeUse, WorkerState
from tests.unit.rest_support import client_for
from tests.unit.savepoint_support import Pipeline
from tests.unit.test_checkpoint_writer_restore import (
    FREQ_MS,
    LAYOUT,
    FakeController,
    FakeMs,
    FakeQuery,
    ObservedScheduler,
    next_checkpoint,
)
from worker.checkpointing.policy import CompletionNotifier, pressure_plan
from worker.checkpointing.runner import CheckpointCommitter, CheckpointRunner
from worker.checkpointing.store import CheckpointStore
from worker.checkpointing.writer import CheckpointWriter
from worker.lifecycle.live import volume_use
from worker.sinks.staging import BatchStager, wait_for_space

STATE = 4096        # each batch's own state file: what deleting its checkpoint frees


# --- which checkpoints a full volume gives up -----------------------------------------------------

@pytest.mark.parametrize(("ids", "complete", "pinned", "doomed"), [
    ([1, 2, 3, 4], 3, (), [1, 2]),          # 3 is what a restore needs, 4 is newer: both kept
    ([1, 2, 3, 4], 3, (1,), [2]),           # a savepoint's pin is kept
    ([2, 3], 0, (), []),                    # nothing complete yet: nothing may go
    ([5], 5, (), []),
])
def test_a_full_volume_gives_up_unpinned_checkpoints_older_than_the_newest_complete(ids, complete, pinned, doomed):
    assert pressure_plan(ids, complete, pinned) == doomed


# --- the runner on a volume that fills up -------------------------------------------------------

class SmallVolume(CheckpointStore):
    """A store whose files may take ``quota`` bytes: a copy that would not
    fit fails as a full disk does (ENOSPC), leaving nothing behind."""

    quota = 0

    def put_file(self, source: Path, known_sha256: str | None = None):
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
        used = sum(p.stat().st_size for p in self.blobs.rglob("*") if p.is_file()) if self.blobs.is_dir() else 0
        if not self.has_blob(digest) and used + source.stat().st_size > self.quota:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(source))
        return super().put_file(source, known_sha256)


@pytest.fixture
def volume(tmp_path):
    """Checkpoints 1-3 complete on a volume that holds three and a half of
    them, and a fourth due: a runner, its parts, and the query."""
    store = SmallVolume(tmp_path / "checkpoints")
    store.quota = 10**9
    query_root = tmp_path / "run" / "queries"
    writer = CheckpointWriter(store, query_root, "w0", LAYOUT.node_names, "fp-1", clock=lambda: 1.0,
                              layouts=LAYOUT.queries)
    clock, controller, notifier = FakeMs(), FakeController(), CompletionNotifier()
    notifier.subscribe(controller.on_complete)
    scheduler = ObservedScheduler(FREQ_MS, clock.now, last_id=0)
    runner = CheckpointRunner(writer, store, scheduler, CheckpointCommitter(controller.commit, notifier),
                              retain=3, clock_ms=clock, tick_s=0.002, newest_complete=lambda: notifier.last_completed)
    query = FakeQuery(query_root)
    runner.start()

    def batch(n: int) -> None:
        """Batch n; Spark's state maintenance has removed the older state version."""
        query.batch(n, state=bytes([n]) * STATE)
        old = query.dir / "state" / "0" / "0" / f"{n}.delta"
        old.unlink(missing_ok=True)

    for checkpoint_id in (1, 2, 3):
        batch(checkpoint_id - 1)
        next_checkpoint(clock, controller, checkpoint_id)
    controller.wait_for(lambda: controller.completed == [1, 2, 3])
    store.quota = sum(p.stat().st_size for p in store.blobs.rglob("*") if p.is_file()) + STATE // 2
    yield store, runner, scheduler, clock, controller, batch
    runner.stop()


def test_a_checkpoint_that_does_not_fit_frees_space_by_retention_first(volume):
    store, runner, scheduler, clock, controller, batch = volume
    batch(3)
    next_checkpoint(clock, controller, 4)
    controller.wait_for(lambda: controller.completed == [1, 2, 3, 4])
    assert store.checkpoint_ids() == [3, 4]         # 1 and 2 went to make room; 3 is the newest complete
    assert runner.stats().failed == 0
    store.verify(store.load(3))
    store.verify(store.load(4))


def test_pinned_checkpoints_stay_and_what_cannot_be_freed_fails_visibly(volume):
    store, runner, scheduler, clock, controller, batch = volume
    runner.pin(frozenset({1, 2}))
    batch(3)
    clock.now += FREQ_MS
    scheduler.wait_finished(4)
    stats = runner.stats()
    assert stats.failed == 1
    assert stats.error.startswith("checkpoint 4: OSError: [Errno 28] No space left on device: the checkpoint volume "
                                  "is full, and nothing is left to delete but the newest complete checkpoint")
    assert store.checkpoint_ids() == [1, 2, 3]
    for checkpoint_id in (1, 2, 3):
        store.verify(store.load(checkpoint_id))
    # Once the savepoint lets go of them, the next checkpoint makes room and goes through.
    runner.pin(frozenset())
    clock.now += FREQ_MS
    controller.wait_for(lambda: controller.completed == [1, 2, 3, 5])
    assert store.checkpoint_ids() == [3, 5]


# --- what the controller shows ---------------------------------------------------------------

def test_failed_checkpoints_and_the_volume_reach_status(service, tmp_path):
    pipeline = Pipeline(service)
    pipeline.register(0)
    service.report_progress(ProgressReport(
        "w0", pipeline.sessions[0], 1, WorkerState.RUNNING, failed_checkpoints=2,
        checkpoint_error="checkpoint 4: OSError: [Errno 28] No space left on device",
        checkpoint_volume=VolumeUse(used_bytes=1_000_000, free_bytes=0)))
    with client_for(service) as rest:
        worker = rest.get("/workers/w0").json()
    assert (worker["failed_checkpoints"], worker["checkpoint_volume"]) == (2, {"used_bytes": 1_000_000,
                                                                              "free_bytes": 0})
    assert worker["checkpoint_error"].endswith("No space left on device")


def test_the_volume_use_is_the_filesystems(tmp_path):
    use = volume_use(tmp_path)
    assert use.used_bytes > 0 and use.free_bytes > 0
    assert volume_use(tmp_path / "missing") == VolumeUse()


# --- staging waits for space -------------------------------------------------------------------

@pytest.fixture
def waits(monkeypatch) -> list[float]:
    """The staging writer's sleeps, recorded instead of slept."""
    from worker.sinks import staging

    slept: list[float] = []
    monkeypatch.setattr(staging, "time", SimpleNamespace(sleep=slept.append))
    return slept


def test_staging_waits_out_a_full_volume_and_stages_once_there_is_room(tmp_path, waits, caplog):
    import pyarrow.parquet as pq

    run_dir = tmp_path / "staging" / "out" / "run-1"
    run_dir.mkdir(parents=True)
    full = [True, True]

    def filling(ids: list[int], path: Path) -> None:
        """Spark's writer: a job that fails on a full volume says so in its error's text."""
        path.mkdir()
        if full:
            full.pop()
            (path / "part-00000-x-c000.snappy.parquet").write_bytes(b"PAR1 half a file")
            raise RuntimeError("Job aborted. java.io.IOException: No space left on device")
        pq.write_table(pa.table({"id": ids}), path / "part-00000-x-c000.snappy.parquet")

    BatchStager([run_dir], write=filling)([1, 2], 7)
    assert waits == [0.5, 1.0]
    assert "waiting for space" in caplog.text
    assert [p.name for p in run_dir.iterdir()] == ["b0000000007"]     # no half-written file left
    assert [p.name for p in (run_dir / "b0000000007").iterdir()] == ["0000.parquet"]
    assert pq.read_table(run_dir / "b0000000007" / "0000.parquet").column("id").to_pylist() == [1, 2]


def test_waiting_for_space_retries_only_a_full_volume(waits):
    tries: list[int] = []

    def full_twice() -> str:
        tries.append(1)
        if len(tries) <= 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return "staged"

    assert wait_for_space(full_twice, "batch 3", backoff=Backoff(1.0, 4.0)) == "staged"
    assert waits == [1.0, 2.0]

    def gone() -> None:
        raise FileNotFoundError(errno.ENOENT, "retired")    # a lingering run's directory was retired

    with pytest.raises(FileNotFoundError):
        wait_for_space(gone, "batch 4")
    assert waits == [1.0, 2.0]
