"""Breaking the lock of a hung holder (worker.checkpointing.lock) and what
the old holder then does (worker.lifecycle.holding, CheckpointStore.guard):
real locks in temporary directories, a real process stopped with SIGSTOP."""

from __future__ import annotations

import dataclasses
import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from worker.checkpointing.lock import FenceError, StoreLock, Superseded
from worker.checkpointing.manifest import FileEntry, Manifest, QueryCut
from worker.checkpointing.store import CheckpointStore
from worker.lifecycle.holding import LockKeeper

REPO = Path(__file__).resolve().parents[2]
SILENCE_S = 10.0


def silent_for(root: Path, seconds: float) -> None:
    """As if the lock's holder had not touched it for ``seconds``."""
    then = time.time() - seconds
    os.utime(root / "LOCK", (then, then))


def manifest(checkpoint_id: int) -> Manifest:
    return Manifest(checkpoint_id=checkpoint_id, worker_id="worker-0", created_at=1.0, duration_ms=1.0,
                    bytes_copied=1, node_names=("n",),
                    queries=(QueryCut("q", 3, {"p0": 5}, {"offsets/3": FileEntry("0" * 64, 1)}),))


def test_a_holder_that_touched_its_lock_recently_keeps_it(tmp_path):
    root = tmp_path / "store"
    holder = CheckpointStore(root)
    holder.acquire("worker-0 first")
    silent_for(root, SILENCE_S - 2)
    with pytest.raises(FenceError, match="worker-0 first"):
        CheckpointStore(root).acquire("standby", silence_s=SILENCE_S)
    assert holder.lock.lost() is None
    holder.lock.touch()
    assert time.time() - (root / "LOCK").stat().st_mtime < 2


def test_without_a_timeout_even_a_silent_holder_keeps_its_lock(tmp_path):
    root = tmp_path / "store"
    CheckpointStore(root).acquire("worker-0 first")
    silent_for(root, 3600)
    with pytest.raises(FenceError):
        CheckpointStore(root).acquire("standby")


def test_a_silent_holders_lock_is_broken_and_it_may_write_nothing_more(tmp_path):
    root = tmp_path / "store"
    old = CheckpointStore(root)
    first = old.acquire("worker-0 old")
    (tmp_path / "x").write_bytes(b"state")
    old.put_file(tmp_path / "x")
    silent_for(root, SILENCE_S + 1)

    new = CheckpointStore(root)
    taken = new.acquire("worker-0 standby", silence_s=SILENCE_S)

    assert (taken.volume_id, taken.generation) == (first.volume_id, first.generation + 1)
    assert new.lock.lost() is None
    reason = old.lock.lost()
    assert reason is not None and "taken over by worker-0 standby (pid " in reason and str(root) in reason
    blobs_before = sorted(p.name for p in (root / "blobs").rglob("*"))
    for write in (lambda: old.write_manifest(manifest(7)), lambda: old.put_file(tmp_path / "x"),
                  lambda: old.collect_garbage(set()), lambda: old.delete(7), lambda: old.quarantine(7)):
        with pytest.raises(Superseded, match="worker-0 standby"):
            write()
    assert old.checkpoint_ids() == [] and sorted(p.name for p in (root / "blobs").rglob("*")) == blobs_before
    new.write_manifest(manifest(7))
    assert new.checkpoint_ids() == [7]


def test_a_manifest_is_never_replaced(tmp_path):
    store = CheckpointStore(tmp_path / "store")
    store.write_manifest(manifest(7))
    store.write_manifest(manifest(7))               # the same again: no change
    other = dataclasses.replace(manifest(7), worker_id="worker-1")
    with pytest.raises(FileExistsError):
        store.write_manifest(other)
    assert store.load(7) == manifest(7)
    assert [p.name for p in store.manifests_dir.iterdir()] == ["000000000007.json"]   # no temporary file left


def test_only_one_process_breaks_a_lock_at_a_time(tmp_path):
    root = tmp_path / "store"
    CheckpointStore(root).acquire("worker-0 hung")
    silent_for(root, SILENCE_S + 1)
    breaking = os.open(root / "TAKEOVER", os.O_RDWR | os.O_CREAT)
    fcntl.flock(breaking, fcntl.LOCK_EX)     # as another standby, midway through breaking it
    try:
        with pytest.raises(FenceError, match="worker-0 hung"):
            StoreLock(root).acquire("standby-b", silence_s=SILENCE_S)
    finally:
        os.close(breaking)
    StoreLock(root).acquire("standby-b", silence_s=SILENCE_S)
    assert (root / "LOCK").read_text().startswith("standby-b (pid ")


def test_the_keeper_touches_the_lock_and_reports_once_when_it_was_broken(tmp_path):
    root = tmp_path / "store"
    old = CheckpointStore(root)
    old.acquire("worker-0 old")
    reasons: list[str] = []
    keeper = LockKeeper(old.lock, reasons.append)
    silent_for(root, 5)
    assert keeper.check() and reasons == []
    assert time.time() - (root / "LOCK").stat().st_mtime < 2
    silent_for(root, SILENCE_S + 1)
    CheckpointStore(root).acquire("worker-0 standby", silence_s=SILENCE_S)
    assert not keeper.check()
    assert len(reasons) == 1 and "taken over by worker-0 standby" in reasons[0]


def test_a_stopped_process_whose_lock_was_broken_learns_it_once_it_runs_again(tmp_path):
    """A real process, stopped (as ``docker pause`` stops one) while it
    holds the lock: a standby breaks it; continued, the process's keeper says
    it was taken over, and its store refuses to write."""
    root = tmp_path / "store"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, threading\n"
         "from worker.checkpointing.lock import Superseded\n"
         "from worker.checkpointing.store import CheckpointStore\n"
         "from worker.lifecycle.holding import LockKeeper\n"
         f"store = CheckpointStore({str(root)!r})\n"
         "store.acquire('worker-0 (paused)')\n"
         "lost = threading.Event()\n"
         "def on_lost(reason):\n"
         "    print('lost:', reason, flush=True)\n"
         "    lost.set()\n"
         "LockKeeper(store.lock, on_lost, interval_s=0.05).start()\n"
         "print('locked', flush=True)\n"
         "lost.wait()\n"
         "try:\n"
         "    store.delete(1)\n"
         "except Superseded as error:\n"
         "    print('refused:', error, flush=True)\n"],
        cwd=REPO, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout.readline().strip() == "locked"
        holder.send_signal(signal.SIGSTOP)
        silent_for(root, SILENCE_S + 1)
        standby = CheckpointStore(root)
        standby.acquire("worker-0 standby", silence_s=SILENCE_S)
        holder.send_signal(signal.SIGCONT)
        out, _ = holder.communicate(timeout=30)
    finally:
        holder.kill()
    assert out.splitlines() == [
        f"lost: checkpoint directory {root} was taken over by {(root / 'LOCK').read_text()}",
        f"refused: checkpoint directory {root} was taken over by {(root / 'LOCK').read_text()}"]
    assert standby.lock.lost() is None
