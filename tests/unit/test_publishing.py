"""Staging, the files target and the publisher, on temporary directories; no
Spark session (the stager is handed a writer that lays files out as Spark's
Parquet writer does), an injected clock, no sleeps."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sparkpoint.errors import describe_error
from sparkpoint.messages import SinkContract, SinkState, VolumeFence
from tests.unit.fakes import FakeClock
from worker.checkpointing.lock import Superseded
from worker.checkpointing.manifest import Manifest, QueryCut
from worker.publishing.book import Contract, Mark, SinkBook
from worker.publishing.publisher import Publication, Publisher
from worker.publishing.staging import StagingArea
from worker.publishing.targets import Fenced, Outcome, files
from worker.publishing.targets.files import FilesTarget, read_fenced_mark, read_mark, read_published
from worker.publishing.targets.postgres import session_name
from worker.sinks import staging as staging_module
from worker.sinks.staging import BatchStager

WORKER = "worker-0"


def rows(ids: list[int]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"id": pa.array(ids, pa.int64())})


def spark_like(tasks: tuple[list[int], ...], path: Path) -> None:
    """Write ``tasks`` (each task's ids) as Spark's Parquet writer lays a
    batch out: a file per task, rows or not, each with a checksum file, and
    a ``_SUCCESS`` marker."""
    path.mkdir()
    for task, ids in enumerate(tasks):
        name = f"part-{task:05d}-6d1f-c000.snappy.parquet"
        pq.write_table(pa.Table.from_batches([rows(ids)]), path / name)
        (path / f".{name}.crc").write_bytes(b"crc")
    (path / "_SUCCESS").write_bytes(b"")


def stage(staging: StagingArea, batch_id: int, *tasks: list[int]) -> None:
    """Stage a batch the way the worker's ``foreachBatch`` does."""
    BatchStager([staging.run_dir], write=spark_like)(tasks, batch_id)


def fresh_staging(tmp_path: Path, run: str = "run-1", keep_through: int | None = None) -> StagingArea:
    staging = StagingArea(tmp_path / "staging" / "out", run)
    staging.recover(keep_through)
    return staging


def ids_in(directory: Path, **kwargs) -> list[int]:
    table = read_published(directory, **kwargs)
    return sorted(table.column("id").to_pylist()) if table is not None else []


def manifest(checkpoint_id: int, batch_id: int, query: str = "out") -> Manifest:
    return Manifest(checkpoint_id=checkpoint_id, worker_id=WORKER, created_at=0.0, duration_ms=0.0, bytes_copied=0,
                    node_names=(), queries=(QueryCut(query, batch_id, {}, {}),))


# --- staging ------------------------------------------------------------------------

def test_a_committed_batch_holds_one_file_per_task_with_rows(tmp_path):
    staging = fresh_staging(tmp_path)
    stage(staging, 0, [1, 2], [], [3])
    assert staging.batches() == [0]
    batch = staging.batch(0)
    assert [p.name for p in batch.files] == ["0000.parquet", "0001.parquet"]
    assert sorted(batch.read().column("id").to_pylist()) == [1, 2, 3]
    # No task file or temporary directory is left behind.
    assert sorted(p.name for p in staging.run_dir.iterdir()) == ["b0000000000"]


def test_an_empty_batch_is_staged_too(tmp_path):
    staging = fresh_staging(tmp_path)
    stage(staging, 4, [])
    assert staging.batches() == [4]
    assert staging.batch(4).read() is None


def test_recover_keeps_batches_up_to_the_restored_checkpoint_and_forgets_the_rest(tmp_path):
    first = fresh_staging(tmp_path, "run-1")
    for batch_id in range(5):
        stage(first, batch_id, [batch_id])
    second = StagingArea(first.root, "run-2")
    assert second.recover(keep_through=2) == 3
    assert second.batches() == [0, 1, 2]
    assert [p.name for p in first.root.iterdir()] == ["run-2"]
    assert second.batch(2).read().column("id").to_pylist() == [2]


def test_recover_without_a_restored_checkpoint_forgets_everything(tmp_path):
    first = fresh_staging(tmp_path, "run-1")
    stage(first, 0, [1])
    second = StagingArea(first.root, "run-2")
    assert second.recover(keep_through=None) == 0
    assert second.batches() == []


def test_a_killed_runs_lingering_spark_cannot_stage_after_the_next_run_started(tmp_path):
    first = fresh_staging(tmp_path, "run-1")
    lingering = BatchStager([first.run_dir], write=spark_like)
    StagingArea(first.root, "run-2").recover(keep_through=None)
    with pytest.raises(FileNotFoundError):
        lingering(([7],), 3)
    assert not first.run_dir.exists()           # not created again either
    assert StagingArea(first.root, "run-2").batches() == []


def test_recover_finishes_what_an_interrupted_recovery_left(tmp_path):
    first = fresh_staging(tmp_path, "run-1")
    for batch_id in range(3):
        stage(first, batch_id, [batch_id])
    # A start-up that retired run-1 and crashed before moving anything.
    first.run_dir.rename(first.root / ".retired-run-1")
    third = StagingArea(first.root, "run-3")
    assert third.recover(keep_through=1) == 2
    assert third.batches() == [0, 1]
    assert [p.name for p in first.root.iterdir()] == ["run-3"]


def test_a_batch_of_a_shared_query_is_written_once_and_staged_for_every_sink(tmp_path):
    sinks = [StagingArea(tmp_path / "staging" / name, "run-1") for name in ("pg", "files")]
    for staging in sinks:
        staging.recover(None)
    writes = []

    def counted(tasks, path: Path) -> None:
        writes.append(path)
        spark_like(tasks, path)

    BatchStager([s.run_dir for s in sinks], write=counted)(([1, 2], [3]), 5)
    assert len(writes) == 1
    pg, files = (s.batch(5) for s in sinks)
    assert [p.name for p in pg.files] == [p.name for p in files.files] == ["0000.parquet", "0001.parquet"]
    assert all(a.stat().st_ino == b.stat().st_ino for a, b in zip(pg.files, files.files))   # linked, not copied
    assert sorted(files.read().column("id").to_pylist()) == [1, 2, 3]
    # Publishing (and deleting) one sink's batch leaves the other's whole.
    sinks[0].discard([5])
    assert sinks[1].batches() == [5] and sorted(sinks[1].batch(5).read().column("id").to_pylist()) == [1, 2, 3]
    assert [sorted(p.name for p in s.run_dir.iterdir()) for s in sinks] == [[], ["b0000000005"]]


def test_a_sink_whose_run_was_retired_fails_the_shared_batch_without_leaving_a_partial_one(tmp_path):
    pg, files = (StagingArea(tmp_path / "staging" / name, "run-1") for name in ("pg", "files"))
    pg.recover(None)
    stager = BatchStager([pg.run_dir, files.run_dir], write=spark_like)   # files' run dir never created
    with pytest.raises(FileNotFoundError):
        stager(([7],), 3)
    assert not files.run_dir.exists()
    assert list(pg.run_dir.iterdir()) == []     # nothing staged for either: Spark runs the batch again


def test_no_sink_sees_a_shared_batch_another_is_still_linking_from(tmp_path, monkeypatch):
    """A publisher may publish and delete its sink's batch as soon as it is
    staged: the links come from a directory no publisher sees."""
    sinks = [StagingArea(tmp_path / "staging" / name, "run-1") for name in ("pg", "files", "audit")]
    for staging in sinks:
        staging.recover(None)
    seen = []
    original = os.link

    def link(source, target) -> None:
        seen.append(sinks[0].batches())
        original(source, target)

    monkeypatch.setattr(staging_module.os, "link", link)
    BatchStager([s.run_dir for s in sinks], write=spark_like)(([1], [2]), 0)
    assert seen == [[]] * 4
    assert [s.batches() for s in sinks] == [[0], [0], [0]]


def test_a_failed_write_leaves_nothing_staged(tmp_path):
    staging = fresh_staging(tmp_path)

    def failing(tasks, path: Path) -> None:
        spark_like(tasks, path)
        raise RuntimeError("a task failed its last attempt")

    with pytest.raises(RuntimeError):
        BatchStager([staging.run_dir], write=failing)(([1],), 0)
    assert list(staging.run_dir.iterdir()) == []


def test_staging_a_batch_again_replaces_the_earlier_attempt(tmp_path):
    staging = fresh_staging(tmp_path)
    stage(staging, 2, [1], [2])
    stage(staging, 2, [3])
    assert staging.batches() == [2]
    assert staging.batch(2).read().column("id").to_pylist() == [3]


# --- files target ---------------------------------------------------------------------

def test_files_are_visible_up_to_the_mark_only(tmp_path):
    staging = fresh_staging(tmp_path)
    stage(staging, 0, [1, 2], [3])
    stage(staging, 1, [4])
    out = tmp_path / "out"
    target = FilesTarget(out, WORKER, complete=False)
    assert target.resume() is None
    assert target.publish([staging.batch(0)], Mark(1, 0)) is Outcome.PUBLISHED
    assert read_mark(out, WORKER) == Mark(1, 0)
    assert ids_in(out) == [1, 2, 3]
    assert sorted(p.name for p in out.iterdir()) == [
        "_published", f"{WORKER}-b0000000000-0000.parquet", f"{WORKER}-b0000000000-0001.parquet"]
    # Staging keeps its files until the publisher deletes the batch.
    assert staging.batch(0).read().num_rows == 3


def test_a_crash_between_placing_files_and_the_mark_publishes_nothing(tmp_path, monkeypatch):
    staging = fresh_staging(tmp_path)
    stage(staging, 0, [1])
    stage(staging, 1, [2, 3])
    out = tmp_path / "out"
    target = FilesTarget(out, WORKER, complete=False)
    target.publish([staging.batch(0)], Mark(1, 0))

    def crash(*_):
        raise OSError("killed before the mark")

    monkeypatch.setattr(files, "atomic_write", crash)
    with pytest.raises(OSError):
        target.publish([staging.batch(1)], Mark(2, 1))
    monkeypatch.undo()
    # Placed but past the mark: invisible, and removed when the worker resumes.
    assert ids_in(out) == [1]
    assert (out / f"{WORKER}-b0000000001-0000.parquet").exists()
    assert target.resume() == Mark(1, 0)
    assert not (out / f"{WORKER}-b0000000001-0000.parquet").exists()
    # Published again from staging: exactly once.
    target.publish([staging.batch(1)], Mark(2, 1))
    assert ids_in(out) == [1, 2, 3]


def test_a_holder_superseded_by_a_later_fence_places_no_file_and_says_why(tmp_path):
    staging = fresh_staging(tmp_path)
    stage(staging, 0, [1])
    stage(staging, 1, [2])
    out = tmp_path / "out"
    paused = FilesTarget(out, WORKER, complete=False, fence=VolumeFence("v1", 3))
    assert paused.resume() is None
    paused.publish([staging.batch(0)], Mark(1, 0))
    # While it was paused, another process took the index over (generation 4)
    # and resumed: the mark is claimed for its fence, unchanged.
    heir = FilesTarget(out, WORKER, complete=False, fence=VolumeFence("v1", 4))
    assert heir.resume() == Mark(1, 0)
    assert read_fenced_mark(out, WORKER) == (Mark(1, 0), VolumeFence("v1", 4))
    with pytest.raises(Fenced, match=r"claimed by a later holder of this worker's index \(fence generation 4; "
                                     r"this process holds 3\): it publishes nothing more"):
        paused.publish([staging.batch(1)], Mark(2, 1))
    with pytest.raises(Fenced):
        paused.resume()
    assert sorted(p.name for p in out.iterdir()) == ["_published", f"{WORKER}-b0000000000-0000.parquet"]
    assert read_fenced_mark(out, WORKER) == (Mark(1, 0), VolumeFence("v1", 4))
    # The heir publishes; a fence of another volume (a new volume, a
    # savepoint restored elsewhere) or none is not refused.
    assert heir.publish([staging.batch(1)], Mark(2, 1)) is Outcome.PUBLISHED
    assert ids_in(out) == [1, 2]
    assert FilesTarget(out, WORKER, complete=False, fence=VolumeFence("v2", 1)).resume() == Mark(2, 1)
    assert FilesTarget(out, WORKER, complete=False).resume() == Mark(2, 1)


def test_a_mark_from_before_fences_reads_and_is_claimed(tmp_path):
    out = tmp_path / "out"
    (out / "_published").mkdir(parents=True)
    (out / "_published" / f"{WORKER}.json").write_text('{"checkpoint_id": 3, "batch_id": 7}')
    assert read_fenced_mark(out, WORKER) == (Mark(3, 7), VolumeFence())
    assert FilesTarget(out, WORKER, complete=False, fence=VolumeFence("v1", 2)).resume() == Mark(3, 7)
    assert read_fenced_mark(out, WORKER) == (Mark(3, 7), VolumeFence("v1", 2))


def test_publishing_a_batch_again_replaces_its_files(tmp_path):
    staging = fresh_staging(tmp_path)
    stage(staging, 0, [1], [2])
    out = tmp_path / "out"
    target = FilesTarget(out, WORKER, complete=False)
    target.publish([staging.batch(0)], Mark(1, 0))
    staging.discard([0])
    stage(staging, 0, [1, 2])         # re-planned after a restore: one task now
    target.publish([staging.batch(0)], Mark(2, 0))
    assert ids_in(out) == [1, 2]


def test_complete_mode_keeps_each_workers_newest_table(tmp_path):
    staging = fresh_staging(tmp_path)
    stage(staging, 3, [1])
    stage(staging, 5, [1, 2])
    out = tmp_path / "out"
    FilesTarget(out, WORKER, complete=True).publish([staging.batch(3)], Mark(1, 3))
    FilesTarget(out, "worker-1", complete=True).publish([staging.batch(3)], Mark(1, 3))
    FilesTarget(out, WORKER, complete=True).publish([staging.batch(5)], Mark(2, 5))
    assert ids_in(out, latest_batch_only=True) == [1, 1, 2]
    assert sorted(p.name for p in out.glob(f"{WORKER}-*")) == [f"{WORKER}-b0000000005-0000.parquet"]


def test_complete_mode_keeps_its_table_when_only_the_mark_moves(tmp_path):
    staging = fresh_staging(tmp_path)
    stage(staging, 3, [1])
    out = tmp_path / "out"
    target = FilesTarget(out, WORKER, complete=True)
    target.publish([staging.batch(3)], Mark(1, 3))
    target.publish([], Mark(2, 6))
    assert target.resume() == Mark(2, 6)
    assert ids_in(out, latest_batch_only=True) == [1]


def test_a_worker_without_a_mark_has_published_nothing(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    pq.write_table(pa.table({"id": [1]}), out / f"{WORKER}-b0000000000-0000.parquet")
    assert read_published(out) is None


def test_files_are_copied_when_staging_is_on_another_filesystem(tmp_path, monkeypatch):
    staging = fresh_staging(tmp_path)
    stage(staging, 0, [1])

    def cross_device(*_):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(files.os, "link", cross_device)
    FilesTarget(tmp_path / "out", WORKER, complete=False).publish([staging.batch(0)], Mark(1, 0))
    assert ids_in(tmp_path / "out") == [1]


# --- the publisher --------------------------------------------------------------------

class FakeTarget:
    """An in-memory transactional target. ``down``: every call fails.
    ``cut``: the next publish fails at COMMIT, "before" or "after" the
    (in-memory) server committed it."""

    description = "fake"

    def __init__(self) -> None:
        self.mark: Mark | None = None
        self.rows: list[int] = []
        self.down = False
        self.cut: str | None = None
        self.resumes = 0

    def resume(self) -> Mark | None:
        if self.down:
            raise ConnectionError("connection refused\n\tIs the server running?")
        self.resumes += 1
        return self.mark

    def publish(self, batches, mark: Mark) -> Outcome:
        if self.down:
            raise ConnectionError("connection refused")
        cut, self.cut = self.cut, None
        if cut == "before":
            raise ConnectionError("server closed the connection unexpectedly")
        for batch in batches:
            table = batch.read()
            self.rows += table.column("id").to_pylist() if table is not None else []
        self.mark = mark
        if cut == "after":
            raise ConnectionError("server closed the connection unexpectedly")
        return Outcome.PUBLISHED

    def close(self) -> None:
        pass


def publisher_for(tmp_path: Path, target, contract=Contract.ON_COMPLETION, complete=False, clock=None,
                  guard=lambda: None):
    staging = fresh_staging(tmp_path)
    publication = Publication("out", "out", SinkContract.TRANSACTIONAL, SinkBook(contract, complete=complete), target,
                              staging)
    publisher = Publisher([publication], clock=clock or FakeClock(), guard=guard)
    assert publisher.resume_all(threading.Event())
    return publisher, staging


def test_the_publisher_publishes_on_completion_and_deletes_what_it_published(tmp_path):
    target = FakeTarget()
    publisher, staging = publisher_for(tmp_path, target)
    for batch_id in range(3):
        stage(staging, batch_id, [batch_id])
    publisher.durable(manifest(1, 1))
    publisher.step()
    assert target.rows == []                     # durable, not complete yet
    publisher.completed(1)
    publisher.step()
    assert (target.rows, target.mark) == ([0, 1], Mark(1, 1))
    assert staging.batches() == [2]
    status = publisher.statuses()[0]
    assert (status.published_checkpoint_id, status.published_batch_id, status.pending_batches) == (1, 1, 1)
    assert not status.state is SinkState.WAITING


def test_a_process_taken_over_touches_neither_the_target_nor_its_staged_batches(tmp_path):
    target = FakeTarget()
    taken_over = threading.Event()

    def guard() -> None:
        if taken_over.is_set():
            raise Superseded("checkpoint directory /c/0 was taken over by worker-0 (pid 7 on standby)")
    publisher, staging = publisher_for(tmp_path, target, guard=guard)
    for batch_id in range(3):
        stage(staging, batch_id, [batch_id])
    publisher.durable(manifest(1, 1))
    publisher.completed(1)
    taken_over.set()
    publisher.step()
    assert (target.rows, target.mark, staging.batches()) == ([], None, [0, 1, 2])
    assert "taken over" in publisher.statuses()[0].error


@pytest.mark.parametrize("cut", ["before", "after"])
def test_a_commit_cut_is_resolved_by_reading_the_mark_again(tmp_path, cut):
    clock = FakeClock()
    target = FakeTarget()
    publisher, staging = publisher_for(tmp_path, target, clock=clock)
    for batch_id in range(3):
        stage(staging, batch_id, [batch_id])
    publisher.durable(manifest(1, 2))
    publisher.completed(1)
    target.cut = cut
    publisher.step()
    assert publisher.statuses()[0].state is SinkState.WAITING
    clock.now += 60
    publisher.step()
    assert sorted(target.rows) == [0, 1, 2]       # exactly once, whichever side of COMMIT it broke
    assert target.mark == Mark(1, 2) and staging.batches() == []
    assert target.resumes == 2                    # at start-up, and after the cut


def test_a_target_that_is_down_makes_the_sink_wait_visibly_and_lose_nothing(tmp_path):
    clock = FakeClock(now=1000.0)
    target = FakeTarget()
    publisher, staging = publisher_for(tmp_path, target, clock=clock)
    target.down = True
    for batch_id in range(2):
        stage(staging, batch_id, [batch_id])
        publisher.durable(manifest(batch_id + 1, batch_id))
        publisher.completed(batch_id + 1)
    publisher.step()
    status = publisher.statuses()[0]
    assert status.state is SinkState.WAITING and status.error == "ConnectionError: connection refused"
    assert status.waiting_since == 1000.0 and status.next_retry_at > 1000.0
    assert (status.pending_batches, status.retries) == (2, 1)
    # Not retried before it is due; staging keeps growing meanwhile.
    clock.now = status.next_retry_at - 0.01
    stage(staging, 2, [2])
    publisher.step()
    assert publisher.statuses()[0].waiting_since == 1000.0
    assert (publisher.statuses()[0].pending_batches, publisher.statuses()[0].retries) == (3, 1)
    clock.now = publisher.statuses()[0].next_retry_at
    publisher.step()
    assert publisher.statuses()[0].retries == 2
    target.down = False
    clock.now = publisher.statuses()[0].next_retry_at
    publisher.step()
    status = publisher.statuses()[0]
    assert status.state is SinkState.OK and status.error == ""
    assert (target.rows, target.mark, status.pending_batches) == ([0, 1], Mark(2, 1), 1)
    assert status.retries == 2                    # failed attempts of this run: a counter


def test_start_up_waits_for_the_targets_mark_until_stopped(tmp_path):
    target = FakeTarget()
    target.down = True
    staging = fresh_staging(tmp_path)
    publisher = Publisher([Publication("out", "out", "transactional", SinkBook(Contract.ON_COMPLETION, complete=False),
                                       target, staging)], clock=FakeClock())
    stop = threading.Event()
    stop.set()
    assert publisher.resume_all(stop) is False
    assert publisher.statuses()[0].state is SinkState.WAITING


def test_a_mark_that_moved_is_read_again_and_nothing_is_written_twice(tmp_path):
    class MovedOnce(FakeTarget):
        def publish(self, batches, mark):
            if self.resumes == 1:
                self.mark = mark            # another attempt committed meanwhile
                self.rows += [b.batch_id for b in batches]
                return Outcome.MARK_MOVED
            return super().publish(batches, mark)

    target = MovedOnce()
    publisher, staging = publisher_for(tmp_path, target)
    stage(staging, 0, [0])
    publisher.restored(manifest(1, 0))
    publisher.step()
    assert target.rows == [0] and target.resumes == 2 and staging.batches() == []


def test_the_restored_checkpoint_is_published_at_once(tmp_path):
    target = FakeTarget()
    publisher, staging = publisher_for(tmp_path, target)
    stage(staging, 0, [5])
    publisher.restored(manifest(3, 0))
    publisher.step()
    assert (target.rows, target.mark) == ([5], Mark(3, 0))


def test_immediate_sinks_publish_whatever_is_staged(tmp_path):
    target = FakeTarget()
    publisher, staging = publisher_for(tmp_path, target, contract=Contract.IMMEDIATE)
    stage(staging, 0, [1])
    stage(staging, 1, [2])
    publisher.step()
    assert (target.rows, target.mark, staging.batches()) == ([1, 2], Mark(0, 1), [])


def test_checkpoints_of_other_queries_leave_a_sink_alone(tmp_path):
    target = FakeTarget()
    publisher, staging = publisher_for(tmp_path, target)
    stage(staging, 0, [1])
    publisher.durable(manifest(1, 0, query="other"))
    publisher.completed(1)
    publisher.step()
    assert target.rows == []


def test_a_sink_takes_its_cut_from_its_query_not_from_a_query_of_its_own_name(tmp_path):
    target = FakeTarget()
    staging = fresh_staging(tmp_path)
    publisher = Publisher([Publication("out", "shared", SinkContract.TRANSACTIONAL,
                                       SinkBook(Contract.ON_COMPLETION, complete=False), target, staging)],
                          clock=FakeClock())
    assert publisher.resume_all(threading.Event())
    stage(staging, 0, [1])
    stage(staging, 1, [2])
    publisher.durable(manifest(1, 7, query="out"))      # another query's batch 7: not this sink's
    publisher.durable(manifest(2, 0, query="shared"))
    publisher.completed(2)
    publisher.step()
    assert target.rows == [1]
    assert publisher.statuses()[0].query == "shared"


def test_error_descriptions_are_one_line():
    assert describe_error(ConnectionError("refused\n\tIs the server running?")) == "ConnectionError: refused"
    assert describe_error(TimeoutError()) == "TimeoutError"


# --- which publication each sink gets ---------------------------------------------------

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("freq, files_contract, files_schedule", [
    ("1000", SinkContract.TRANSACTIONAL, Contract.ON_COMPLETION), ("0", SinkContract.AT_LEAST_ONCE, Contract.IMMEDIATE)])
def test_each_sink_gets_its_contract_target_and_staging(tmp_path, freq, files_contract, files_schedule):
    from worker.api.loader import load_pipeline
    from worker.publishing.sinks import publications
    from worker.publishing.targets.postgres import PostgresTransactionalTarget, PostgresUpsertTarget
    from worker.settings import WorkerSettings

    settings = WorkerSettings.from_env({"SP_PG_HOST": "db", "SP_CHECKPOINT_FREQ": freq,
                                        "SP_CHECKPOINT_DIR": str(tmp_path), "SP_OUTPUT_DIR": str(tmp_path / "out")})
    built = {p.name: p for p in publications(load_pipeline(REPO / "pipelines" / "trades_postgres.py"),
                                             settings, "run-9", VolumeFence("v1", 2))}
    assert set(built) == {"enriched_pg", "enriched_out", "vwap_pg"}
    assert isinstance(built["enriched_pg"].target, PostgresTransactionalTarget)
    assert (built["enriched_pg"].contract, built["enriched_pg"].book.contract) == \
        (SinkContract.TRANSACTIONAL, Contract.ON_COMPLETION)
    assert isinstance(built["vwap_pg"].target, PostgresUpsertTarget)
    # Its aggregate emits updates (an upsert's default): every staged batch is published, not only the newest.
    assert (built["vwap_pg"].contract, built["vwap_pg"].book.contract, built["vwap_pg"].book.complete) == \
        (SinkContract.UPSERT, Contract.IMMEDIATE, False)
    assert isinstance(built["enriched_out"].target, FilesTarget)
    assert (built["enriched_out"].contract, built["enriched_out"].book.contract) == (files_contract, files_schedule)
    assert built["enriched_out"].target.directory == tmp_path / "out" / "trades_enriched"
    assert built["enriched_out"].target._fence == built["enriched_pg"].target._fence == VolumeFence("v1", 2)
    assert built["enriched_out"].staging.run_dir == tmp_path / "staging" / "enriched_out" / "run-9"


def test_rewinding_the_files_mark_takes_back_the_files_past_it(tmp_path):
    staging = fresh_staging(tmp_path)
    for batch_id in range(3):
        stage(staging, batch_id, [batch_id])
    out = tmp_path / "out"
    target = FilesTarget(out, WORKER, complete=False)
    target.publish([staging.batch(b) for b in range(3)], Mark(4, 2))
    target.rewind(Mark(2, 0))
    assert read_mark(out, WORKER) == Mark(2, 0)
    assert ids_in(out) == [0]
    assert [p.name for p in out.glob("*.parquet")] == [f"{WORKER}-b0000000000-0000.parquet"]


def test_a_rewound_publisher_publishes_the_batches_past_the_restored_cut_again(tmp_path):
    target = FakeTarget()
    target.rewind = lambda mark: setattr(target, "mark", mark)
    publisher, staging = publisher_for(tmp_path, target)
    target.mark = Mark(5, 4)
    publisher.resume_all(threading.Event())
    assert publisher.rewind(manifest(2, 1)) == [
        "sink out: published up to checkpoint 5, batch 4; rewound to checkpoint 2, batch 1: its output past that "
        "is published again"]
    assert target.mark == Mark(2, 1)
    # Spark replays batches 2.. after the restored checkpoint; they publish again.
    for batch_id in (2, 3):
        stage(staging, batch_id, [batch_id])
    publisher.restored(manifest(2, 1))
    publisher.durable(manifest(6, 3))
    publisher.completed(6)
    publisher.step()
    assert (target.rows, target.mark) == ([2, 3], Mark(6, 3))
    assert publisher.rewind(manifest(6, 3)) == []              # nothing past it: nothing to rewind


def test_a_long_worker_id_names_its_sessions_within_postgresqls_limit():
    long_ids = ["w" * 60 + "-0", "w" * 60 + "-1"]
    names = {session_name(worker, VolumeFence("v1", 2**40)) for worker in long_ids}
    assert len(names) == 2 and all(len(name) <= 63 and name.endswith(f" g{2**40}") for name in names)
