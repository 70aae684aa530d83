"""Checkpoints and recovery with real processes and real Spark sessions:
workers killed at random points (and mid-checkpoint), the controller killed,
corrupt checkpoints, checkpoints disabled.

The files sinks publish on checkpoint completion, so after every restore each
event id is published exactly once and the aggregates are exact; with
checkpoints disabled they are at-least-once, and only gaps are failures.
"""

from __future__ import annotations

import os
import random
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sparkpoint.eventlog import EventLog
from sparkpoint.producer import write_trades
from tests.support import (
    all_published,
    caught_up,
    expected_vwap,
    get_json,
    killed_by_fault,
    wait_until,
    worker_status,
)
from worker.checkpointing.manifest import FileEntry, Manifest
from worker.checkpointing.store import CheckpointStore
from worker.publishing.targets.files import read_published

pytestmark = pytest.mark.integration

PARTITIONS = 2
QUERIES = {"enriched_out", "vwap_out"}
FAST = {"SP_MAX_RECORDS_PER_BATCH": "300", "SP_TRIGGER_INTERVAL": "200", "SP_REPORT_INTERVAL": "300"}


def check_output(stack, events: list[dict], *, exactly_once: bool = True) -> int:
    """Once everything staged is published: no event id missing, none twice
    (``exactly_once``), aggregates exact. Returns how many duplicates there are."""
    wait_until(lambda: all_published(get_json(stack.config.status_url, stack.config.api_token)), timeout_s=60,
               what="every staged batch to be published")
    ids = [row["id"] for row in read_published(stack.config.output_dir / "trades_enriched").to_pylist()]
    assert set(ids) == {e["id"] for e in events}, "an event is missing from the sink"
    if exactly_once:
        assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} events published twice"
    current = read_published(stack.config.output_dir / "vwap", latest_batch_only=True).to_pylist()
    expected = expected_vwap(events)
    assert {row["sym"]: (row["trades"], row["volume"]) for row in current} == \
           {sym: (want["trades"], want["volume"]) for sym, want in expected.items()}
    for row in current:
        assert row["notional"] == pytest.approx(expected[row["sym"]]["notional"], rel=1e-9)
    return len(ids) - len(set(ids))


def process_exited(service) -> bool:
    return service.process.poll() is not None


def durable_ids(stack, since: int = 0) -> list[int]:
    """Checkpoint ids in the order worker-0 made them durable, as its log
    says (every run appends to it), from byte ``since`` of the log on."""
    text = stack.services["worker-0"].log_path.read_bytes()[since:].decode(errors="replace")
    return [int(i) for i in re.findall(r"checkpoint (\d+) durable", text)]


def log_size(stack) -> int:
    return stack.services["worker-0"].log_path.stat().st_size


def runs_left(directory: Path) -> list[str]:
    """Run directories (and retired ones) under ``directory``."""
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(("run-", ".retired-run-")))


def only_what_is_kept(stack, store: CheckpointStore) -> None:
    """With worker-0 stopped: the blob store holds exactly the files its
    retained manifests reference, and the work and staging directories only
    the last run's directory."""
    kept, problems = store.readable()
    assert problems == []
    referenced = set().union(*(m.digests() for m in kept))
    stored = {blob.name for shard in store.blobs.iterdir() for blob in (shard.iterdir() if shard.is_dir() else [shard])}
    assert stored == referenced, (f"{len(stored - referenced)} blobs no retained manifest references, "
                                  f"{len(referenced - stored)} referenced blobs missing")
    last_run = f"-{stack.services['worker-0'].process.pid}"
    staging = store.root / "staging"
    for directory in [stack.config.work_dir(0), *staging.iterdir()]:
        runs = runs_left(directory)
        assert all(run.endswith(last_run) for run in runs), f"{directory} holds {runs}, not only the last run's"


def test_worker_killed_mid_checkpoint_and_at_random_points_recovers_exactly(make_stack):
    seed = int(os.environ.get("SP_TEST_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    print(f"kill schedule seed: SP_TEST_SEED={seed}")
    stack = make_stack(workers=1, SP_CHECKPOINT_FREQ="1000", **FAST)
    log = EventLog.create(stack.config.log_dir / "trades", PARTITIONS)
    events = write_trades(log, 6000, seed=seed)
    stack.start_controller()

    # 1. The worker SIGKILLs itself while writing its 3rd checkpoint (files
    #    copied, manifest not yet written): that checkpoint must not exist,
    #    though its files were copied.
    stack.start_worker(0, SP_TEST_FAULT="checkpoint.blobs_copied:3")
    wait_until(lambda: killed_by_fault(stack, "checkpoint.blobs_copied"), timeout_s=240,
               what="the fault sentinel to kill the worker")
    store = CheckpointStore(stack.config.checkpoint_dir(0))
    durable = store.checkpoint_ids()
    assert durable == [1, 2] == durable_ids(stack), f"only the two completed checkpoints are durable, found {durable}"
    referenced = set().union(*(store.load(i).digests() for i in durable))
    copied = {blob.name for shard in store.blobs.iterdir() if shard.is_dir() for blob in shard.iterdir()}
    assert copied - referenced, "the killed checkpoint copied no files: the fault did not fire after copying"

    # 2. Restart: it restores checkpoint 2 and is seen recovering.
    stack.start_worker(0)
    recovering = wait_until(
        lambda: (w := worker_status(stack)) and w["state"] == "recovering" and w["recovery"]["restored_checkpoint_id"] and w,
        timeout_s=120, what="the restarted worker to report recovering")
    assert recovering["recovery"]["restored_checkpoint_id"] == 2
    assert recovering["recovery"]["target_bytes"] > 0

    # 3. Kill it again at a random point after a few more batches.
    extra = rng.randint(1, 4)
    start_batch = wait_until(lambda: (w := worker_status(stack)) and w["batch_id"] >= 0 and w["batch_id"] + 1,
                             timeout_s=180, what="the restored worker's first batch") - 1
    wait_until(lambda: worker_status(stack)["batch_id"] >= start_batch + extra, timeout_s=180,
               what=f"{extra} more batches")
    print(f"killing worker-0 at batch {worker_status(stack)['batch_id']} (+{extra})")
    stack.kill("worker-0")

    # 4. Restart; it catches up with the whole log and state is exact.
    stack.start_worker(0)
    final = wait_until(lambda: caught_up(stack, log, QUERIES), timeout_s=300, what="the worker to process the whole log")
    assert final["recovery"]["restored_checkpoint_id"] > 2
    assert final["last_checkpoint"]["checkpoint_id"] > final["recovery"]["restored_checkpoint_id"]
    check_output(stack, events)
    # Checkpoint ids, in the order they became durable across the three runs,
    # kept strictly increasing (an id is never reused); retention kept the last 3.
    assert stack.stop("worker-0") == 0
    made = durable_ids(stack)
    assert all(a < b for a, b in zip(made, made[1:])), f"checkpoint ids made durable out of order: {made}"
    assert made[-1] > 3 and store.checkpoint_ids() == made[-3:]
    # 5. Nothing of the earlier runs is left: no file of a deleted (or the
    #    killed) checkpoint, no earlier run's directory.
    only_what_is_kept(stack, store)


def test_controller_killed_workers_keep_going_and_it_recovers_their_checkpoints(make_stack):
    stack = make_stack(workers=1, SP_CHECKPOINT_FREQ="500", SP_CONTROLLER_CHECKPOINT_FREQ="300",
                       SP_PRODUCER_RATE="300", **FAST)
    stack.start_controller()
    stack.start_producer()
    stack.start_worker(0)
    wait_until(lambda: (w := worker_status(stack)) and w["state"] == "running" and w["last_checkpoint"],
               timeout_s=240, what="the worker running with a completed checkpoint")
    stack.kill("controller")

    # While the controller is down the worker keeps processing and checkpointing.
    store = CheckpointStore(stack.config.checkpoint_dir(0))
    before = store.checkpoint_ids()[-1]
    newer = wait_until(lambda: (ids := store.checkpoint_ids()) and ids[-1] >= before + 3 and ids[-1],
                       timeout_s=120, what="checkpoints while the controller is down")

    # The restarted controller reloads its checkpoint and learns the newer ones.
    stack.start_controller()
    shown = wait_until(
        lambda: (w := worker_status(stack)) and w["state"] == "running" and w["last_checkpoint"] and
        w["last_checkpoint"]["checkpoint_id"] >= newer and w,
        timeout_s=120, what="the restarted controller to show the worker's latest checkpoint")
    assert shown["state"] == "running"
    assert shown["heartbeat_age_s"] < 10


def three_unpublished_checkpoints(make_stack, seed: int, **env: str):
    """A worker that processed and published its first events, then took
    three more durable checkpoints while the controller was down: none of
    them completed, so none is published, and a restore may fall back past
    any of them (never past a published one). Returns the stack, the log,
    the store, every event written and the published checkpoint."""
    stack = make_stack(workers=1, SP_CHECKPOINT_FREQ="500", **FAST, **env)
    log = EventLog.create(stack.config.log_dir / "trades", PARTITIONS)
    events = write_trades(log, 1500, seed=seed)
    stack.start_controller()
    stack.start_worker(0)
    store = CheckpointStore(stack.config.checkpoint_dir(0))
    wait_until(lambda: caught_up(stack, log, QUERIES) and all_published(get_json(stack.config.status_url, stack.config.api_token)),
               timeout_s=240, what="the first events processed and published")
    stack.kill("controller")
    published = store.checkpoint_ids()[-1]

    def unpublished() -> int:
        return len([i for i in store.checkpoint_ids() if i > published])

    # Only a checkpoint after a commit is durable (an idle one is empty), and
    # how many batches one write becomes depends on the machine's speed: write
    # more after each new checkpoint until there are three.
    while (before := unpublished()) < 3:
        events += write_trades(log, 500, seed=seed + 1 + before)
        wait_until(lambda: unpublished() > before, timeout_s=120,
                   what=f"durable checkpoint {before + 1} of 3 while the controller is down")
    return stack, log, store, events, published


def own_state_file(store: CheckpointStore, above: int) -> tuple[Manifest, Manifest, str, str, FileEntry]:
    """The newest checkpoint but one (above ``above``) holding a Spark state
    file (a state store's delta or snapshot) that the checkpoint just older
    than it lacks: it, that older one, the query, the file's path and entry.
    (The aggregate's state need not change between any two checkpoints: the
    other query may have committed alone.)"""
    manifests = [store.load(i) for i in store.checkpoint_ids() if i > above]
    for newer, older in zip(reversed(manifests[1:-1]), reversed(manifests[:-2])):
        for query in newer.queries:
            for path, entry in sorted(query.files.items()):
                if path.startswith("state/") and path.endswith((".delta", ".snapshot")) and \
                        entry.sha256 not in older.digests():
                    return newer, older, query.name, path, entry
    raise AssertionError(f"no two of checkpoints {[m.checkpoint_id for m in manifests]} differ in a state file")


def test_corrupt_checkpoints_are_named_and_skipped_and_a_second_worker_is_fenced(make_stack):
    # Retention keeps every checkpoint here, to pick from.
    stack, log, store, events, published = three_unpublished_checkpoints(make_stack, seed=11,
                                                                         SP_CHECKPOINT_RETAIN="1000")

    # A second worker on the same checkpoint directory is refused while the first lives.
    second = subprocess.run(
        [sys.executable, "-m", "worker"], cwd=stack.config.pipeline.parents[1], capture_output=True, text=True,
        timeout=60, env={**stack._base_env(), "SP_WORKER_INDEX": "0",
                         "SP_CHECKPOINT_DIR": str(stack.config.checkpoint_dir(0))})
    assert second.returncode == 2
    assert str(stack.config.checkpoint_dir(0)) in second.stderr and "in use" in second.stderr
    assert "Traceback" not in second.stderr

    assert stack.stop("worker-0") == 0
    # Flip a byte in a Spark state file only the middle one holds; truncate
    # every manifest newer than the middle one.
    middle, oldest, query, state_file, entry = own_state_file(store, above=published)
    truncated = [i for i in store.checkpoint_ids() if i > middle.checkpoint_id]
    for checkpoint_id in truncated:
        path = store.manifest_path(checkpoint_id)
        path.write_bytes(path.read_bytes()[:40])
    blob = store.blob_path(entry.sha256)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))

    stack.start_controller()
    since = log_size(stack)
    stack.start_worker(0)
    final = wait_until(lambda: caught_up(stack, log, QUERIES), timeout_s=300, what="the worker to process the whole log")
    # It fell back past all of them to the oldest, naming the state file.
    assert final["recovery"]["restored_checkpoint_id"] == oldest.checkpoint_id
    worker_log = stack.services["worker-0"].log_path.read_text()
    for checkpoint_id in truncated:
        assert f"{checkpoint_id:012d}.json: not a valid checkpoint manifest" in worker_log
    assert f"checkpoint {middle.checkpoint_id} is corrupt" in worker_log
    assert f"checkpoint {middle.checkpoint_id}: {query}/{state_file} does not match its checksum" in worker_log
    quarantined = sorted(int(p.stem) for p in (store.root / "quarantine").iterdir())
    assert quarantined == sorted([middle.checkpoint_id, *truncated])
    check_output(stack, events)
    # Checkpoints taken after the fallback never reuse a quarantined id.
    after = wait_until(lambda: durable_ids(stack, since), timeout_s=60, what="a checkpoint after the fallback")
    assert min(after) > max(quarantined), f"ids {after} after the fallback reuse a quarantined one {quarantined}"


def test_checkpoints_disabled_restart_replays_from_the_beginning(make_stack):
    stack = make_stack(workers=1, SP_CHECKPOINT_FREQ="0", **FAST)
    log = EventLog.create(stack.config.log_dir / "trades", PARTITIONS)
    events = write_trades(log, 1500, seed=5)
    stack.start_controller()
    stack.start_worker(0)
    first = wait_until(lambda: caught_up(stack, log, QUERIES), timeout_s=240, what="the first run to process the log")
    stack.kill("worker-0")
    assert CheckpointStore(stack.config.checkpoint_dir(0)).checkpoint_ids() == []

    stack.start_worker(0)
    # Until the new run registers, the controller still shows the killed one.
    final = wait_until(lambda: (w := caught_up(stack, log, QUERIES)) and w["registrations"] > first["registrations"] and w,
                       timeout_s=240, what="the replay to process the log")
    # The new run read every event again: nothing was restored.
    assert final["recovery"]["restored_checkpoint_id"] == 0
    assert final["rows_processed"] == len(events)
    assert final["last_checkpoint"] is None
    duplicates = check_output(stack, events, exactly_once=False)
    print(f"duplicates with checkpoints off (at-least-once): {duplicates}")


def tear(store: CheckpointStore, checkpoint_id: int, lose: str) -> str:
    """Rewrite a durable checkpoint's manifest without ``metadata`` or the
    newest ``offsets/N`` of each query: a torn Spark cut. Returns what it lost."""
    from dataclasses import replace

    manifest = store.load(checkpoint_id)
    lost = {q.name: lose.replace("N", str(q.batch_id)) for q in manifest.queries}
    store.manifest_path(checkpoint_id).write_text(replace(manifest, queries=tuple(
        replace(q, files={p: e for p, e in q.files.items() if p != lost[q.name]}) for q in manifest.queries)).to_json())
    return lost[manifest.queries[0].name]


def test_torn_cuts_are_refused_named_and_fallen_back_from_never_replayed_into_a_published_sink(make_stack):
    # 1. Durable checkpoints nothing has published yet.
    stack, log, store, events, published = three_unpublished_checkpoints(make_stack, seed=21)
    assert stack.stop("worker-0") == 0

    # 2. Tear the newest two: one loses Spark's metadata, the other its newest offsets.
    newest, middle, oldest = store.checkpoint_ids()[-1:-4:-1]
    assert oldest > published
    tear(store, newest, "metadata")
    lost = tear(store, middle, "offsets/N")

    # 3. The restart refuses both, naming them, and restores the next one.
    stack.start_controller()
    stack.start_worker(0)
    final = wait_until(lambda: caught_up(stack, log, QUERIES), timeout_s=300, what="the worker to process the whole log")
    assert final["recovery"]["restored_checkpoint_id"] == oldest
    worker_log = stack.services["worker-0"].log_path.read_text()
    assert f"checkpoint {newest} is corrupt, not restoring it: checkpoint {newest}: query " in worker_log
    assert "is a torn cut at batch" in worker_log and "it lacks metadata" in worker_log
    assert f"it lacks {lost}" in worker_log
    quarantined = sorted(p.name for p in (store.root / "quarantine").iterdir())
    assert quarantined == [f"{middle:012d}.json", f"{newest:012d}.json"]
    check_output(stack, events)

    # 4. Tear the checkpoint the sinks published: nothing at or after it is
    #    intact, so the worker refuses to start rather than replay into them.
    assert stack.stop("worker-0") == 0
    newest = store.checkpoint_ids()[-1]
    tear(store, newest, "offsets/N")
    refused = stack.start_worker(0)
    wait_until(lambda: process_exited(refused), timeout_s=240, what="the worker to refuse the torn checkpoint")
    assert refused.process.returncode != 0
    worker_log = stack.services["worker-0"].log_path.read_text()
    assert f"no intact checkpoint at or after {newest}" in worker_log
    assert "would publish it twice" in worker_log and "torn cut" in worker_log
    ids = [row["id"] for row in read_published(stack.config.output_dir / "trades_enriched").to_pylist()]
    assert len(ids) == len(set(ids)) == len(events)


def worker_and_standby(make_stack, seed: int):
    """A worker that may hand its index over and a standby, waiting; the
    stack, the log and the events written."""
    stack = make_stack(workers=1, SP_CHECKPOINT_FREQ="500", **FAST)
    log = EventLog.create(stack.config.log_dir / "trades", PARTITIONS)
    events = write_trades(log, 600, seed=seed)
    stack.start_controller()
    stack.start_worker(0, takes_over=True)
    standby = stack.start_standby()
    wait_until(lambda: "every index (1) is held" in standby.log_path.read_text(), timeout_s=240,
               what="the standby's Spark session up, waiting")
    return stack, log, events


def standbys(stack) -> list[tuple[int, str]]:
    """The standbys /status lists: their pids (all run on this host) and states."""
    status = get_json(stack.config.status_url, stack.config.api_token)
    assert all(s["host"] == socket.gethostname() for s in status["standbys"]), status["standbys"]
    return [(s["pid"], s["state"]) for s in status["standbys"]]


def test_a_standby_takes_over_a_killed_worker_and_the_restarted_one_stands_by_in_turn(make_stack):
    stack, log, events = worker_and_standby(make_stack, seed=31)
    logs = {name: stack.services[name].log_path for name in ("worker-0", "standby")}
    # It ran the pipeline once, warming up, on scratch space it then deleted.
    assert "standby: rehearsed 2 queries and their restart" in logs["standby"].read_text()
    assert not (stack.config.root / "work" / "standby" / "rehearsal").exists()
    # /status shows it ready, and the process that runs index 0.
    wait_until(lambda: standbys(stack) == [(stack.services["standby"].process.pid, "ready")], timeout_s=30,
               what="/status to list the standby as ready", interval_s=0.2)
    assert (worker_status(stack)["host"], worker_status(stack)["pid"]) == (
        socket.gethostname(), stack.services["worker-0"].process.pid)

    for round_, (victim, heir) in enumerate((("worker-0", "standby"), ("standby", "worker-0"))):
        # 1. The victim runs index 0 with a complete checkpoint; then it dies.
        worker = wait_until(lambda: (w := caught_up(stack, log, QUERIES)) and w["last_checkpoint"] and w,
                            timeout_s=240, what=f"{victim} caught up with a complete checkpoint")
        complete = worker["last_checkpoint"]["checkpoint_id"]
        heir_log = logs[heir].stat().st_size
        stack.kill(victim)
        events += write_trades(log, 600, seed=32 + round_)

        # 2. The heir, waiting with its session up, takes index 0 over and
        #    restores the last complete checkpoint (or a newer durable one).
        wait_until(lambda: (w := caught_up(stack, log, QUERIES)) and
                   w["recovery"]["restored_checkpoint_id"] >= complete, timeout_s=240,
                   what=f"{heir} to take over index 0 and catch up")
        took_over = logs[heir].read_bytes()[heir_log:].decode()
        assert "standby: taking over index 0 as worker-0" in took_over
        assert worker_status(stack)["pid"] == stack.services[heir].process.pid
        assert stack.services[heir].process.pid not in dict(standbys(stack))

        # 3. The victim, started again, finds index 0 held and stands by.
        since = logs[victim].stat().st_size
        if victim == "worker-0":
            stack.start_worker(0, takes_over=True)
        else:
            stack.start_standby()
        wait_until(lambda: "every index (1) is held" in logs[victim].read_bytes()[since:].decode(),
                   timeout_s=240, what=f"{victim} started again to stand by")
        wait_until(lambda: standbys(stack) == [(stack.services[victim].process.pid, "ready")], timeout_s=30,
                   what=f"/status to list {victim} as the standby", interval_s=0.2)
    check_output(stack, events)


def test_a_takeover_while_the_controller_is_down_waits_for_it_and_loses_nothing(make_stack):
    stack, log, events = worker_and_standby(make_stack, seed=41)
    standby = stack.services["standby"]
    worker = wait_until(lambda: (w := caught_up(stack, log, QUERIES)) and w["last_checkpoint"] and w,
                        timeout_s=240, what="worker-0 caught up with a complete checkpoint")

    # 1. The controller goes down, then the worker: the standby takes the
    #    index's lock but cannot register, so runs nothing yet.
    stack.kill("controller")
    stack.kill("worker-0")
    events += write_trades(log, 600, seed=42)
    wait_until(lambda: "controller at localhost" in standby.log_path.read_text().partition(
        "standby: taking over index 0")[2], timeout_s=60, what="the standby, holding index 0, to find no controller")

    # 2. The controller back, the take-over completes from the last complete checkpoint.
    stack.start_controller()
    wait_until(lambda: (w := caught_up(stack, log, QUERIES)) and
               w["recovery"]["restored_checkpoint_id"] >= worker["last_checkpoint"]["checkpoint_id"],
               timeout_s=240, what="the standby to take over once the controller is back")
    check_output(stack, events)
