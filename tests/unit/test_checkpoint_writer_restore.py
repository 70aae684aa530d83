"""Taking checkpoints of a fake Spark working directory, restoring them, and
the checkpoint threads (runner + committer) against a fake controller.

No Spark: ``FakeQuery`` writes the files Spark would (``metadata``,
``offsets/N``, ``commits/N``, ``state/0/0/<v>.delta``, ``.crc`` side files),
each through a temporary name and a rename, as Spark's checkpoint file
manager does."""

from __future__ import annotations

import errno
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from sparkpoint.fileio import sha256_of
from sparkpoint.messages import CheckpointInfo
from worker.checkpointing.layout import Column, QueryLayout, StatefulNode, StateSchema
from worker.checkpointing.manifest import Manifest
from worker.checkpointing.policy import CheckpointScheduler, CompletionNotifier
from worker.checkpointing.runner import CheckpointCommitter, CheckpointRunner
from worker.checkpointing.store import CheckpointStore
from worker.checkpointing.writer import CheckpointWriter
from worker.stateplan.layout import PipelineLayout
from worker.stateplan.restore import RestoreRefused, restore

WAIT_S = 10.0
BATCH_METADATA = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1700000000000,
                             "conf": {"spark.sql.shuffle.partitions": "1"}}, separators=(",", ":"))
COMMIT = b'v1\n{"nextBatchWatermarkMs":0}'    # the same bytes for every batch, as in Spark
# The pipeline FakeQuery stands for: one query with one stateful node (state/0).
LAYOUT = PipelineLayout("fp-1", ("src", "count_state", "counts"), {"counts": QueryLayout(
    "src", "source.log:{}", (StatefulNode("count_state", StateSchema((Column("k", "string"),),
                                                                     (Column("n", "bigint", "count(1)"),))),))})


def spark_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.5f1c.tmp"
    tmp.write_bytes(data)
    os.replace(tmp, path)
    (path.parent / f".{path.name}.crc").write_bytes(b"crc\x00" + path.name.encode())


class FakeQuery:
    def __init__(self, query_root: Path, name: str = "counts") -> None:
        self.dir = query_root / name
        spark_write(self.dir / "metadata", b'{"id":"2d3c6e0a-7f1e-4c55-9d0a-1b2c3d4e5f60"}')

    def offsets(self, batch: int) -> bytes:
        return f'v1\n{BATCH_METADATA}\n{{"0":{100 * (batch + 1)},"1":{10 * batch}}}'.encode()

    def batch(self, n: int, *, commit: bool = True, offsets: bytes | None = None, state: bytes | None = None) -> None:
        """Batch n: its offsets, the state version it writes (n+1), then its commit."""
        spark_write(self.dir / "offsets" / str(n), offsets or self.offsets(n))
        spark_write(self.dir / "state" / "0" / "0" / f"{n + 1}.delta", state or f"delta of batch {n};".encode() * 4)
        if commit:
            spark_write(self.dir / "commits" / str(n), COMMIT)

    def size(self, path: str) -> int:
        return (self.dir / path).stat().st_size


def files_under(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in directory.rglob("*") if p.is_file()}


@pytest.fixture
def query_root(tmp_path) -> Path:
    root = tmp_path / "run" / "queries"
    root.mkdir(parents=True)
    return root


@pytest.fixture
def store(tmp_path) -> CheckpointStore:
    return CheckpointStore(tmp_path / "checkpoints")


@pytest.fixture
def writer(store, query_root) -> CheckpointWriter:
    return CheckpointWriter(store, query_root, "w0", LAYOUT.node_names, "fp-1", clock=lambda: 1700000000.0,
                            layouts=LAYOUT.queries)


# --- CheckpointWriter -------------------------------------------------------------------

def test_take_cuts_at_the_highest_committed_batch(writer, store, query_root):
    query = FakeQuery(query_root)
    query.batch(0)
    query.batch(1)
    query.batch(2, commit=False)       # in flight
    manifest = writer.take(1)
    assert manifest.checkpoint_id == 1
    [cut] = manifest.queries
    assert (cut.name, cut.batch_id) == ("counts", 1)
    assert cut.offsets == {"0": 200, "1": 10}
    assert set(cut.files) == {"metadata", "offsets/0", "offsets/1", "commits/0", "commits/1",
                              "state/0/0/1.delta", "state/0/0/2.delta"}
    assert manifest.node_names == ("src", "count_state", "counts")
    assert cut.layout == LAYOUT.queries["counts"]
    assert store.load(1) == manifest


def test_take_before_any_commit_returns_none(writer, store, query_root):
    FakeQuery(query_root).batch(0, commit=False)
    assert writer.take(1) is None
    assert store.checkpoint_ids() == []


def test_take_with_no_queries_at_all_returns_none(writer, store):
    assert writer.take(1) is None


def test_a_query_without_a_commit_is_left_out(writer, query_root):
    FakeQuery(query_root, "counts").batch(0)
    FakeQuery(query_root, "late").batch(0, commit=False)
    assert [q.name for q in writer.take(1).queries] == ["counts"]


def test_the_first_checkpoint_copies_each_distinct_content_once(writer, query_root):
    query = FakeQuery(query_root)
    query.batch(0)
    query.batch(1)
    manifest = writer.take(1)
    # commits/0 and commits/1 have the same bytes: stored once.
    distinct = {entry.sha256: entry.size for entry in manifest.queries[0].files.values()}
    assert manifest.bytes_copied == sum(distinct.values())
    assert len(distinct) == len(manifest.queries[0].files) - 1


def test_the_next_checkpoint_copies_only_the_new_files(writer, query_root):
    query = FakeQuery(query_root)
    query.batch(0)
    query.batch(1)
    writer.take(1)
    query.batch(2)
    manifest = writer.take(2)
    assert manifest.queries[0].batch_id == 2
    assert {"offsets/2", "commits/2", "state/0/0/3.delta"} <= set(manifest.queries[0].files)
    # commits/2 has content the store already holds.
    assert manifest.bytes_copied == query.size("offsets/2") + query.size("state/0/0/3.delta")


def test_a_file_rewritten_under_the_same_name_is_stored_with_its_new_content(writer, store, query_root, tmp_path):
    query = FakeQuery(query_root)
    query.batch(0)
    query.batch(1)
    first = writer.take(1)
    # After a restore Spark writes batch 1 again: same names, same sizes, other bytes.
    query.batch(1, offsets=query.offsets(1).replace(b'"0":200', b'"0":201'),
                state=b"DELTA OF BATCH 1;" * 4)
    second = writer.take(2)
    restored = tmp_path / "restored"
    store.materialize(second, restored)
    assert files_under(restored / "counts") == {path: (query.dir / path).read_bytes()
                                                for path in second.queries[0].files}
    assert second.queries[0].offsets == {"0": 201, "1": 10}
    assert second.queries[0].files["offsets/1"] != first.queries[0].files["offsets/1"]
    assert second.bytes_copied == query.size("offsets/1") + query.size("state/0/0/2.delta")


def test_a_checkpoint_taken_after_a_blob_went_bad_is_intact(store, query_root, tmp_path):
    query = FakeQuery(query_root)
    query.batch(0)
    query.batch(1)
    first = CheckpointWriter(store, query_root, "w0", ("src", "counts"), "fp-1").take(1)
    # Disk corruption in a blob every checkpoint shares (each commits/N has these bytes).
    blob = store.blob_path(first.queries[0].files["commits/0"].sha256)
    blob.write_bytes(COMMIT.replace(b"v1", b"v2"))
    assert restore(store, 1, tmp_path / "fresh", LAYOUT).manifest is None      # 1 is corrupt: reported
    # The restarted worker goes on checkpointing the intact working directory.
    query.batch(2)
    second = CheckpointWriter(store, query_root, "w0", ("src", "counts"), "fp-1").take(2)
    store.verify(second)


# --- restore ----------------------------------------------------------------------------

@pytest.fixture
def two_checkpoints(writer, query_root) -> tuple[Manifest, Manifest]:
    """Checkpoint 1 at batch 1, checkpoint 2 at batch 2."""
    query = FakeQuery(query_root)
    query.batch(0)
    query.batch(1)
    first = writer.take(1)
    query.batch(2)
    return first, writer.take(2)


def blob_only_in(newer: Manifest, older: Manifest, store: CheckpointStore) -> tuple[str, Path]:
    path, entry = next((p, e) for p, e in newer.queries[0].files.items() if e.sha256 not in older.digests())
    return path, store.blob_path(entry.sha256)


def test_restore_rebuilds_the_chosen_checkpoint(store, two_checkpoints, tmp_path):
    _, second = two_checkpoints
    target = tmp_path / "fresh" / "queries"
    outcome = restore(store, 2, target, LAYOUT)
    assert outcome.manifest == second
    assert outcome.corrupt == []
    assert files_under(target / "counts") == {path: store.blob_path(entry.sha256).read_bytes()
                                              for path, entry in second.queries[0].files.items()}
    assert "offsets/2" in files_under(target / "counts")


def test_restore_falls_back_when_the_newest_manifest_is_truncated(store, two_checkpoints, tmp_path):
    first, _ = two_checkpoints
    manifest_file = store.manifest_path(2)
    manifest_file.write_bytes(manifest_file.read_bytes()[:100])
    target = tmp_path / "fresh" / "queries"
    outcome = restore(store, 2, target, LAYOUT)
    assert outcome.manifest == first
    assert len(outcome.corrupt) == 1 and str(manifest_file) in outcome.corrupt[0]
    assert set(files_under(target / "counts")) == set(first.queries[0].files)
    assert store.checkpoint_ids() == [1]           # the bad one is quarantined


def test_restore_falls_back_when_a_blob_of_the_newest_is_corrupt(store, two_checkpoints, tmp_path):
    first, second = two_checkpoints
    path, blob = blob_only_in(second, first, store)
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0x01
    blob.write_bytes(bytes(data))
    target = tmp_path / "fresh" / "queries"
    outcome = restore(store, 2, target, LAYOUT)
    assert outcome.manifest == first
    assert len(outcome.corrupt) == 1
    assert "checkpoint 2" in outcome.corrupt[0] and path in outcome.corrupt[0]
    assert "offsets/2" not in files_under(target / "counts")


def test_restore_refuses_to_go_below_the_floor(store, two_checkpoints, tmp_path):
    with pytest.raises(RestoreRefused, match="no intact checkpoint at or after 3"):
        restore(store, 2, tmp_path / "fresh", LAYOUT, floor=3)


def test_restore_refuses_when_the_only_checkpoint_above_the_floor_is_corrupt(store, two_checkpoints, tmp_path):
    store.manifest_path(2).write_text("{")
    with pytest.raises(RestoreRefused) as raised:
        restore(store, 2, tmp_path / "fresh", LAYOUT, floor=2)
    assert "000000000002.json" in str(raised.value)


def test_restore_refuses_when_the_volume_holds_no_checkpoint_but_a_sink_published(store, tmp_path):
    # A lost volume: replaying from the beginning would publish everything again.
    with pytest.raises(RestoreRefused, match="restoring an older one \\(or none\\)"):
        restore(store, None, tmp_path / "fresh", LAYOUT, floor=4)


def test_nothing_intact_and_no_floor_restores_nothing(store, two_checkpoints, tmp_path):
    for checkpoint_id in (1, 2):
        store.manifest_path(checkpoint_id).write_text('{"checkpoint_id": ')
    outcome = restore(store, 2, tmp_path / "fresh", LAYOUT)
    assert outcome.manifest is None
    assert len(outcome.corrupt) == 2


def test_no_chosen_checkpoint_restores_nothing(store, two_checkpoints, tmp_path):
    assert restore(store, None, tmp_path / "fresh", LAYOUT).manifest is None


# --- CheckpointRunner + CheckpointCommitter (threaded) --------------------------------

class FakeMs:
    """The runner's millisecond clock, advanced by the test. The ticker reads
    it once per tick, so counting reads tells when a tick has been evaluated."""

    def __init__(self) -> None:
        self.now = 0.0
        self.reads = 0
        self._cond = threading.Condition()

    def __call__(self) -> float:
        with self._cond:
            self.reads += 1
            self._cond.notify_all()
            return self.now

    def wait_ticks(self, n: int) -> None:
        """Wait until the ticker has finished at least ``n - 1`` more ticks."""
        with self._cond:
            target = self.reads + n
            assert self._cond.wait_for(lambda: self.reads >= target, timeout=WAIT_S)


class ObservedScheduler(CheckpointScheduler):
    """The real scheduler, telling the test when the writer finished a checkpoint."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._cond = threading.Condition()
        self.finished_ids: list[int] = []

    def finished(self, checkpoint_id: int, *, taken: bool = True) -> None:
        super().finished(checkpoint_id, taken=taken)
        with self._cond:
            self.finished_ids.append(checkpoint_id)
            self._cond.notify_all()

    def wait_finished(self, checkpoint_id: int) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: checkpoint_id in self.finished_ids, timeout=WAIT_S)


class GatedWriter:
    """Wraps the writer: ``take`` raises once if told to, or waits for ``release``."""

    def __init__(self, writer: CheckpointWriter, *, fail_first: bool = False) -> None:
        self._writer = writer
        self.fail_first = fail_first
        self.release = threading.Event()
        self.started = threading.Event()
        self.calls = 0

    def take(self, checkpoint_id: int) -> Manifest | None:
        self.calls += 1
        self.started.set()
        if self.fail_first:
            self.fail_first = False
            raise OSError(28, "No space left on device")
        assert self.release.wait(WAIT_S)
        return self._writer.take(checkpoint_id)


class FakeController:
    """The commit function: records every attempt; raises while ``down``."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.down = False
        self.attempts: list[int] = []
        self.committed: list[CheckpointInfo] = []
        self.completed: list[int] = []      # what the notifier delivered
        self.durable: list[int] = []        # what the runner handed to on_durable (the publisher)
        self.durable_at_commit: list[bool] = []

    def on_durable(self, manifest: Manifest) -> None:
        with self.cond:
            self.durable.append(manifest.checkpoint_id)

    def commit(self, checkpoint: CheckpointInfo) -> int:
        with self.cond:
            self.attempts.append(checkpoint.checkpoint_id)
            self.durable_at_commit.append(checkpoint.checkpoint_id in self.durable)
            self.cond.notify_all()
            if self.down:
                raise ConnectionError("controller unreachable")
            self.committed.append(checkpoint)
            return checkpoint.checkpoint_id

    def on_complete(self, checkpoint_id: int) -> None:
        with self.cond:
            self.completed.append(checkpoint_id)
            self.cond.notify_all()

    def wait_for(self, predicate: Callable[[], bool]) -> None:
        with self.cond:
            assert self.cond.wait_for(predicate, timeout=WAIT_S), \
                f"timed out: attempts={self.attempts} completed={self.completed}"


FREQ_MS = 100


@pytest.fixture
def runner_parts(writer, store, query_root):
    clock, controller, notifier = FakeMs(), FakeController(), CompletionNotifier()
    notifier.subscribe(controller.on_complete)
    started: list[CheckpointRunner] = []

    def start(retain: int = 3, take=writer) -> tuple[CheckpointRunner, ObservedScheduler]:
        scheduler = ObservedScheduler(FREQ_MS, clock.now, last_id=0)
        runner = CheckpointRunner(take, store, scheduler, CheckpointCommitter(controller.commit, notifier),
                                  retain=retain, clock_ms=clock, tick_s=0.002, on_durable=controller.on_durable)
        runner.start()
        started.append(runner)
        return runner, scheduler

    query = FakeQuery(query_root)
    query.batch(0)
    yield start, clock, controller, notifier, query, writer
    for runner in started:
        runner.stop()


def next_checkpoint(clock: FakeMs, controller: FakeController, checkpoint_id: int) -> None:
    clock.now += FREQ_MS
    controller.wait_for(lambda: checkpoint_id in controller.attempts)


def test_runner_writes_and_commits_a_checkpoint(runner_parts, store):
    start, clock, controller, notifier, _, _ = runner_parts
    runner, _ = start()
    next_checkpoint(clock, controller, 1)
    controller.wait_for(lambda: controller.completed == [1])
    assert store.checkpoint_ids() == [1]
    assert controller.committed == [store.load(1).info()]
    assert notifier.last_completed == 1
    # The publisher learned the checkpoint's cut before its completion could arrive.
    assert controller.durable == [1] and controller.durable_at_commit == [True]
    stats = runner.stats()
    assert (stats.dropped, stats.failed, stats.error, stats.durable) == (0, 0, "", (store.load(1).info(),))


def test_runner_keeps_only_the_retained_checkpoints_and_their_blobs(runner_parts, store):
    start, clock, controller, _, query, _ = runner_parts
    runner, _ = start(retain=2)
    for checkpoint_id in range(1, 5):
        query.batch(checkpoint_id)
        next_checkpoint(clock, controller, checkpoint_id)
    controller.wait_for(lambda: controller.completed == [1, 2, 3, 4])
    assert store.checkpoint_ids() == [3, 4]
    # What the worker reports to the controller: what is on its volume now.
    assert runner.stats().durable == (store.load(3).info(), store.load(4).info())
    assert controller.committed[-1] == store.load(4).info()
    assert controller.committed[-1].queries[0].batch_id == 4
    assert stored_blobs(store) == store.load(3).digests() | store.load(4).digests()


def stored_blobs(store: CheckpointStore) -> set[str]:
    return {p.name for p in store.blobs.rglob("*") if p.is_file()}


def test_runner_lists_the_store_once_then_deletes_retired_files_by_their_manifests(runner_parts, store, monkeypatch):
    start, clock, controller, _, query, _ = runner_parts
    store.blobs.mkdir(parents=True)
    (store.blobs / "ab").mkdir()
    (store.blobs / "ab" / ("ab" * 32)).write_bytes(b"left by a crash")
    sweeps: list[set[str]] = []
    sweep = store.collect_garbage
    monkeypatch.setattr(store, "collect_garbage", lambda referenced: sweeps.append(referenced) or sweep(referenced))
    start(retain=2)
    for checkpoint_id in range(1, 6):
        query.batch(checkpoint_id)
        next_checkpoint(clock, controller, checkpoint_id)
    controller.wait_for(lambda: controller.completed == [1, 2, 3, 4, 5])
    # One sweep at start removed what the crash left; each later retirement
    # deleted the retired checkpoint's files that the kept ones do not share.
    assert len(sweeps) == 1
    assert stored_blobs(store) == store.load(4).digests() | store.load(5).digests()


def test_files_a_failed_checkpoint_stored_go_with_the_next_retirement(runner_parts, store, tmp_path):
    start, clock, controller, _, query, writer = runner_parts
    stray = tmp_path / "stray"
    stray.write_bytes(b"stored, then the checkpoint failed")

    class FailingMidway:
        calls = 0

        def take(self, checkpoint_id: int) -> Manifest | None:
            self.calls += 1
            if self.calls == 2:
                store.put_file(stray)
                raise OSError(5, "Input/output error")
            return writer.take(checkpoint_id)

    runner, scheduler = start(retain=1, take=FailingMidway())
    next_checkpoint(clock, controller, 1)
    query.batch(1)
    clock.now += FREQ_MS
    scheduler.wait_finished(2)                  # failed, its file stored
    assert store.has_blob(sha256_of(stray))
    query.batch(2)
    next_checkpoint(clock, controller, 3)
    controller.wait_for(lambda: controller.completed == [1, 3])
    assert runner.stats().failed == 1
    assert stored_blobs(store) == store.load(3).digests()


def test_committer_retries_and_commits_only_the_newest_once_the_controller_is_back(runner_parts, store):
    start, clock, controller, notifier, query, _ = runner_parts
    controller.down = True
    start()
    next_checkpoint(clock, controller, 1)
    query.batch(1)
    next_checkpoint(clock, controller, 2)
    with controller.cond:
        controller.down = False
    controller.wait_for(lambda: controller.completed == [2])
    # Checkpoint 1 is subsumed by 2: never committed on its own.
    assert [m.checkpoint_id for m in controller.committed] == [2]
    assert notifier.last_completed == 2
    assert store.checkpoint_ids() == [1, 2]
    query.batch(2)
    next_checkpoint(clock, controller, 3)
    controller.wait_for(lambda: controller.completed == [2, 3])


def test_a_checkpoint_due_while_one_is_being_written_is_dropped(runner_parts, store):
    start, clock, controller, _, query, writer = runner_parts
    gated = GatedWriter(writer)
    runner, scheduler = start(take=gated)
    clock.now += FREQ_MS
    assert gated.started.wait(WAIT_S)          # checkpoint 1 is being written
    clock.now += FREQ_MS
    clock.wait_ticks(2)                         # the ticker has seen the next interval
    assert runner.stats().dropped == 1
    gated.release.set()
    controller.wait_for(lambda: controller.completed == [1])
    # The dropped one is not queued: nothing more until the next interval.
    clock.wait_ticks(3)
    assert (gated.calls, scheduler.in_flight) == (1, None)
    query.batch(1)                              # something new to checkpoint
    clock.now += FREQ_MS
    controller.wait_for(lambda: controller.completed == [1, 2])
    assert store.checkpoint_ids() == [1, 2]


def test_nothing_committed_since_the_last_checkpoint_takes_none(writer, query_root):
    query = FakeQuery(query_root)
    query.batch(0)
    assert writer.take(1).checkpoint_id == 1
    assert writer.take(2) is None               # idle: no identical checkpoint
    query.batch(1)
    assert writer.take(2).queries[0].batch_id == 1


def test_a_failed_checkpoint_is_counted_and_the_next_one_is_taken(runner_parts, store):
    start, clock, controller, _, _, writer = runner_parts
    gated = GatedWriter(writer, fail_first=True)
    gated.release.set()
    runner, scheduler = start(take=gated)
    clock.now += FREQ_MS
    assert gated.started.wait(WAIT_S)           # checkpoint 1: disk full
    scheduler.wait_finished(1)
    assert runner.stats().failed == 1
    assert runner.stats().error.startswith("checkpoint 1: OSError: [Errno 28] No space left on device: the checkpoint "
                                           "volume is full, and nothing is left to delete")
    clock.now += FREQ_MS
    controller.wait_for(lambda: controller.completed == [2])
    assert store.checkpoint_ids() == [2]


# --- on-demand checkpoints (savepoints) and pins ------------------------------------------

class Answers:
    """Collects a runner's answers to requests; ``wait`` for the n-th."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self._cond = threading.Condition()

    def __call__(self, checkpoint_id: int) -> None:
        with self._cond:
            self.ids.append(checkpoint_id)
            self._cond.notify_all()

    def wait(self, count: int) -> list[int]:
        with self._cond:
            assert self._cond.wait_for(lambda: len(self.ids) >= count, timeout=WAIT_S)
            return self.ids


def test_a_requested_checkpoint_is_taken_at_once_and_answered_with_its_id(runner_parts, store):
    start, clock, controller, _, _, _ = runner_parts
    runner, _ = start()
    answers = Answers()
    runner.request(answers)                                    # no interval passes on the clock
    assert answers.wait(1) == [1]
    assert store.checkpoint_ids() == [1]


def test_a_request_while_idle_is_answered_with_the_newest_checkpoint(runner_parts, store):
    start, clock, controller, _, _, _ = runner_parts
    runner, scheduler = start()
    next_checkpoint(clock, controller, 1)
    answers = Answers()
    runner.request(answers)
    assert answers.wait(1) == [1]                              # nothing new to cut: 1 covers it
    assert store.checkpoint_ids() == [1]


def test_pinned_checkpoints_survive_retention(runner_parts, store):
    start, clock, controller, _, query, _ = runner_parts
    runner, _ = start(retain=1)
    next_checkpoint(clock, controller, 1)
    controller.wait_for(lambda: controller.completed == [1])
    runner.pin(frozenset({1}))
    for checkpoint_id in (2, 3):
        query.batch(checkpoint_id - 1)
        next_checkpoint(clock, controller, checkpoint_id)
    controller.wait_for(lambda: controller.completed == [1, 2, 3])
    assert store.checkpoint_ids() == [1, 3]
    store.verify(store.load(1))                                # its blobs were not collected


# --- export and import (savepoints) -------------------------------------------------------

def test_an_exported_checkpoint_imports_into_another_store_under_a_new_id(store, two_checkpoints, tmp_path):
    from worker.checkpointing.transfer import export_checkpoint, import_checkpoint

    _, second = two_checkpoints
    exported = tmp_path / "savepoints" / "nightly" / "worker-0"
    export_checkpoint(store, 2, exported)
    other = CheckpointStore(tmp_path / "elsewhere")
    imported = import_checkpoint(exported, 2, other, new_id=9)
    assert imported.checkpoint_id == 9 and imported.queries == second.queries
    assert other.checkpoint_ids() == [9]
    other.verify(other.load(9))
    target = tmp_path / "restored" / "queries"
    assert restore(other, 9, target, LAYOUT).manifest == imported
    assert files_under(target / "counts") == {p: store.blob_path(e.sha256).read_bytes()
                                              for p, e in second.queries[0].files.items()}


def test_a_corrupt_export_is_not_imported(store, two_checkpoints, tmp_path):
    from worker.checkpointing.store import CorruptCheckpoint
    from worker.checkpointing.transfer import export_checkpoint, import_checkpoint

    exported = tmp_path / "export"
    manifest = export_checkpoint(store, 2, exported)
    blob = CheckpointStore(exported).blob_path(manifest.queries[0].files["offsets/2"].sha256)
    blob.write_bytes(blob.read_bytes() + b"x")
    other = CheckpointStore(tmp_path / "elsewhere")
    with pytest.raises(CorruptCheckpoint, match="offsets/2"):
        import_checkpoint(exported, 2, other, new_id=3)
    assert other.checkpoint_ids() == []


# --- restore into a changed pipeline --------------------------------------------------------

def test_a_stateful_node_inserted_upstream_gets_an_empty_state_on_restore(store, two_checkpoints, tmp_path):
    from worker.stateplan.sparkfiles import EMPTY_LZ4_SNAPSHOT

    dedupe = StatefulNode("dedupe", StateSchema((Column("id", "bigint"),), ()))
    changed = PipelineLayout("fp-2", ("src", "dedupe", "count_state", "counts"), {"counts": QueryLayout(
        "src", "source.log:{}", (dedupe,) + LAYOUT.queries["counts"].stateful)})
    target = tmp_path / "fresh" / "queries"
    outcome = restore(store, 2, target, changed)
    assert [(d.node, d.action.value) for d in outcome.plan.nodes] == [
        ("src", "keep"), ("dedupe", "fresh"), ("count_state", "keep"), ("counts", "keep")]
    files = files_under(target / "counts")
    # The kept node stays operator 0; the new one (upstream) is operator 1 and
    # starts empty at version 3, the one batch 3 loads; Spark's operator
    # metadata is left out, so it is written afresh.
    assert files["state/0/0/3.delta"] == files_under(tmp_path / "run" / "queries" / "counts")["state/0/0/3.delta"]
    assert files["state/1/0/3.snapshot"] == EMPTY_LZ4_SNAPSHOT
    assert "offsets/2" in files and "metadata" in files


def test_a_renamed_query_continues_its_origin_under_a_new_query_id(store, two_checkpoints, tmp_path):
    renamed = PipelineLayout("fp-2", ("src", "count_state", "totals"), {"totals": LAYOUT.queries["counts"]})
    target = tmp_path / "fresh" / "queries"
    outcome = restore(store, 2, target, renamed)
    assert [(q.name, q.batch_id) for q in outcome.resumed.queries] == [("totals", 2)]
    assert not (target / "counts").exists()
    metadata = json.loads((target / "totals" / "metadata").read_text())
    assert metadata["id"] != json.loads((tmp_path / "run" / "queries" / "counts" / "metadata").read_text())["id"]


def test_a_plan_that_is_refused_stops_the_restore_naming_the_node(store, two_checkpoints, tmp_path):
    changed_value = StateSchema((Column("k", "string"),), (Column("n", "bigint", "sum(size)"),))
    refused = PipelineLayout("fp-2", LAYOUT.node_names, {"counts": QueryLayout(
        "src", "source.log:{}", (StatefulNode("count_state", changed_value),))})
    with pytest.raises(RestoreRefused, match="count_state: value column n changed from count\\(1\\) to sum\\(size\\)"):
        restore(store, 2, tmp_path / "fresh", refused)


# --- files planted on a volume: regular files only, never through a link, never blocking -------------

def test_a_blob_that_is_a_link_is_refused_even_to_the_right_content(store, two_checkpoints, tmp_path):
    first, second = two_checkpoints
    path, blob = blob_only_in(second, first, store)
    elsewhere = tmp_path / "planted"
    elsewhere.write_bytes(blob.read_bytes())        # the right size and digest, outside the store
    blob.unlink()
    blob.symlink_to(elsewhere)
    outcome = restore(store, 2, tmp_path / "fresh" / "queries", LAYOUT)
    assert outcome.manifest == first
    assert len(outcome.corrupt) == 1 and "not a regular file in the store" in outcome.corrupt[0]
    assert path in outcome.corrupt[0]


def test_a_manifest_that_is_a_fifo_is_skipped_without_blocking(store, two_checkpoints, tmp_path):
    first, _ = two_checkpoints
    manifest_file = store.manifest_path(2)
    manifest_file.unlink()
    os.mkfifo(manifest_file)        # reading it would wait for a writer forever
    outcome = restore(store, 2, tmp_path / "fresh" / "queries", LAYOUT)
    assert outcome.manifest == first
    assert len(outcome.corrupt) == 1 and "cannot be read (not a regular file)" in outcome.corrupt[0]


def test_untrusted_reads_refuse_links_devices_fifos_and_oversize_files_before_reading(tmp_path):
    from sparkpoint.fileio import FileTooLarge, NotARegularFile, read_regular

    zero = tmp_path / "zero"
    zero.symlink_to("/dev/zero")        # stat says 0 bytes; reading it never ends
    with pytest.raises(OSError) as linked:
        sha256_of(zero, size=0)
    assert linked.value.errno == errno.ELOOP
    with pytest.raises(NotARegularFile):
        sha256_of(Path("/dev/zero"), size=0)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(NotARegularFile):
        read_regular(fifo, 100)
    big = tmp_path / "big"
    with big.open("wb") as f:
        f.truncate(1 << 30)             # sparse: a gigabyte that costs nothing on disk
    with pytest.raises(FileTooLarge):
        read_regular(big, 1 << 20)
    small = tmp_path / "small"
    small.write_bytes(b"abc")
    assert read_regular(small, 10) == b"abc"
    assert sha256_of(small, size=4) is None         # not the size listed: not read
