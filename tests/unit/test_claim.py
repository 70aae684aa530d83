"""Which index a worker runs: its own, or as a standby the first whose
lock is free (worker.lifecycle.claim), on real locks in temporary directories."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sparkpoint.settings import SettingsError
from worker.checkpointing.lock import FenceError
from worker.checkpointing.manifest import Manifest, QueryCut
from worker.checkpointing.store import CheckpointStore
from worker.lifecycle.claim import Standby, after_takeover, claim, claim_own
from worker.settings import WorkerSettings

REPO = Path(__file__).resolve().parents[2]


def environ(tmp_path, **extra: str) -> dict[str, str]:
    return {"SP_WORKER_COUNT": "3", "SP_CHECKPOINT_DIR": str(tmp_path / "checkpoints" / "w{index}"),
            "SP_WORK_DIR": str(tmp_path / "work"), **extra}


def holders(tmp_path, *indices: int) -> dict[int, CheckpointStore]:
    """Stores whose lock this test holds, as a live worker would."""
    stores = {i: CheckpointStore(tmp_path / "checkpoints" / f"w{i}") for i in indices}
    for i, store in stores.items():
        store.acquire(f"worker-{i} elsewhere")
    return stores


def test_each_index_gets_its_own_directory_and_id(tmp_path):
    env = environ(tmp_path, SP_WORKER_INDEX="1")
    own = WorkerSettings.from_env(env)
    assert (own.worker_index, own.worker_id, own.checkpoint_dir) == (1, "worker-1", tmp_path / "checkpoints" / "w1")
    assert own.takes_over
    other = WorkerSettings.for_index({**env, "SP_WORKER_ID": "node-{index}"}, 2)
    assert (other.worker_index, other.worker_id, other.checkpoint_dir) == (2, "node-2", tmp_path / "checkpoints" / "w2")
    assert not WorkerSettings.from_env({"SP_CHECKPOINT_DIR": str(tmp_path)}).takes_over


@pytest.mark.parametrize(("extra", "variable"), [
    ({"SP_WORKER_ID": "fixed"}, "SP_WORKER_ID"),
    ({"SP_WORKER_ROLE": "standby", "SP_CHECKPOINT_DIR": "/c"}, "SP_WORKER_ROLE"),
    ({"SP_WORKER_ROLE": "standby", "SP_WORK_DIR": ""}, "SP_WORK_DIR"),
    ({"SP_WORKER_ROLE": "spare"}, "SP_WORKER_ROLE"),
    ({"SP_HEARTBEAT_TIMEOUT": "2000"}, "SP_HEARTBEAT_TIMEOUT"),
])
def test_settings_a_takeover_cannot_keep_are_refused_naming_the_variable(tmp_path, extra, variable):
    with pytest.raises(SettingsError) as raised:
        WorkerSettings.from_env(environ(tmp_path, **extra))
    assert raised.value.variable == variable


def test_a_worker_takes_its_own_index_or_is_told_who_holds_it(tmp_path):
    env = environ(tmp_path, SP_WORKER_INDEX="1")
    held = holders(tmp_path, 1)
    with pytest.raises(FenceError) as raised:
        claim(WorkerSettings.from_env(env))
    assert raised.value.holder.startswith("worker-1 elsewhere (pid ")
    held[1].release()
    taken = claim(WorkerSettings.from_env(env))
    assert (taken.settings.worker_id, taken.fence.generation) == ("worker-1", 2)


def test_a_standby_takes_the_first_index_whose_lock_is_free_and_keeps_its_own_work_dir(tmp_path):
    env = environ(tmp_path, SP_WORKER_ROLE="standby")
    held = holders(tmp_path, 0, 1, 2)
    standby = Standby(env, WorkerSettings.from_env(env))
    assert standby.try_once() is None
    held[2].release()
    taken = standby.try_once()
    assert (taken.settings.worker_index, taken.settings.worker_id) == (2, "worker-2")
    assert taken.settings.work_dir == tmp_path / "work"
    with pytest.raises(FenceError):      # it now holds index 2 as the worker did
        CheckpointStore(tmp_path / "checkpoints" / "w2").acquire("another")


def test_a_standby_takes_over_a_holder_silent_for_the_heartbeat_timeout(tmp_path):
    env = environ(tmp_path, SP_WORKER_ROLE="standby", SP_HEARTBEAT_TIMEOUT="5000")
    held = holders(tmp_path, 0, 1, 2)
    standby = Standby(env, WorkerSettings.from_env(env))
    hung = tmp_path / "checkpoints" / "w1" / "LOCK"
    then = time.time() - 4
    os.utime(hung, (then, then))
    assert standby.try_once() is None          # silent 4 s: not yet
    then = time.time() - 6
    os.utime(hung, (then, then))
    taken = standby.try_once()
    assert taken.settings.worker_index == 1 and taken.fence.generation == 2
    assert "taken over by worker-1 (pid " in held[1].lock.lost()
    assert held[0].lock.lost() is None and held[2].lock.lost() is None

    os.utime(tmp_path / "checkpoints" / "w0" / "LOCK", (0, 0))
    never = {**env, "SP_HEARTBEAT_TIMEOUT": "0"}
    assert Standby(never, WorkerSettings.from_env(never)).try_once() is None


def test_waiting_ends_with_the_index_freed_between_tries_or_with_stop(tmp_path):
    env = environ(tmp_path, SP_WORKER_ROLE="standby")
    held = holders(tmp_path, 0, 1, 2)
    standby = Standby(env, WorkerSettings.from_env(env), poll_s=0)
    idle: list[int] = []

    def on_idle() -> None:       # the holder of index 0 dies after the second try
        idle.append(1)
        if len(idle) == 2:
            held[0].release()
    taken = standby.wait(threading.Event(), on_idle)
    assert (taken.settings.worker_index, len(idle)) == (0, 2)

    stop = threading.Event()
    assert Standby(env, WorkerSettings.from_env(env), poll_s=0).wait(stop, on_idle=stop.set) is None


def checkpointed(store: CheckpointStore, checkpoint_id: int, **batches: int) -> None:
    store.write_manifest(Manifest(checkpoint_id, "worker-0", 0.0, 0.0, 0, ("q",),
                                  tuple(QueryCut(name, batch, {}, {}) for name, batch in batches.items())))


def test_a_worker_whose_index_is_held_stands_by_once_the_holder_checkpointed_a_new_batch_or_takes_it_if_freed(
        tmp_path):
    settings = WorkerSettings.from_env(environ(tmp_path, SP_WORKER_INDEX="0"))
    held = holders(tmp_path, 0)
    checkpointed(held[0], 7, a=40, b=20)        # the crashed run's newest
    tries: list[int] = []

    def clock() -> float:       # read once for the deadline, then once per try
        tries.append(1)
        if len(tries) == 2:     # the new holder checkpoints the batches it restored: not yet
            checkpointed(held[0], 8, a=40, b=20)
        if len(tries) == 3:     # then a first new batch of one query
            checkpointed(held[0], 9, a=40, b=21)
        if len(tries) == 5:     # and of the other
            checkpointed(held[0], 10, a=41, b=21)
        return 0.0
    assert after_takeover(settings, threading.Event(), clock=clock, poll_s=0) is None
    assert len(tries) == 5      # it went on at once, not before

    def freed() -> float:       # the holder dies instead
        held[0].release()
        return 0.0
    taken = after_takeover(settings, threading.Event(), clock=freed, poll_s=0)
    assert taken is not None and taken.settings.worker_index == 0


def test_without_takeover_a_held_index_stops_the_worker_and_with_it_waiting_is_bounded(tmp_path):
    holders(tmp_path, 0)
    fixed = WorkerSettings.from_env({"SP_CHECKPOINT_DIR": str(tmp_path / "checkpoints" / "w0")})
    with pytest.raises(FenceError):
        claim_own(fixed, threading.Event())
    times = iter([0.0, 10.0, 31.0])
    assert after_takeover(WorkerSettings.from_env(environ(tmp_path)), threading.Event(),
                          clock=lambda: next(times), poll_s=0) is None


def test_a_standby_starting_holds_back_until_every_index_checkpointed_a_new_batch_of_every_query(tmp_path):
    env = environ(tmp_path, SP_WORKER_ROLE="standby", SP_WORKER_COUNT="2")
    held = holders(tmp_path, 0, 1)      # the workers, just started: nothing checkpointed yet
    tries: list[int] = []

    def clock() -> float:       # read once for the deadline, then once per try
        tries.append(1)
        if len(tries) == 2:
            checkpointed(held[0], 1, a=0, b=0)
        if len(tries) == 3:     # index 1's first checkpoint, one query still to commit a batch
            checkpointed(held[1], 1, a=0, b=-1)
        if len(tries) == 4:
            checkpointed(held[1], 2, a=0, b=0)
        return 0.0
    Standby(env, WorkerSettings.from_env(env)).hold_back(threading.Event(), clock=clock, poll_s=0)
    assert len(tries) == 4      # it went on at once, not before

    times = [31.0, 10.0, 0.0]           # nothing new: it gives up waiting after 30 s
    Standby(env, WorkerSettings.from_env(env)).hold_back(threading.Event(), clock=times.pop, poll_s=0)
    assert times == []


def test_a_worker_fences_its_index_before_it_imports_pyspark_grpc_or_its_pipeline(tmp_path):
    """A container restarted just after a take-over of its index waits in
    the fence; PySpark's, gRPC's and the pipeline's imports (a second of CPU)
    would take the cores the take-over's first batches need."""
    probe = (
        "import sys, threading\n"
        "import worker.main as main\n"
        "seen = []\n"
        "def claim_own(settings, stop):\n"
        "    seen.extend(m for m in ('pyspark', 'grpc', 'trading') if m in sys.modules)\n"
        "    stop.set()\n"
        "main.claim_own = claim_own\n"
        f"settings = main.WorkerSettings.from_env({environ(tmp_path, SP_PIPELINE='pipelines/trades_postgres.py')!r})\n"
        "print(main.run(settings, None, threading.Event()), seen, 'trading' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.stdout.splitlines()[-1:] == ["0 [] False"], result.stderr
