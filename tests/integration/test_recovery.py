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
import subprocess
import sys

import pytest

from sparkpoint.eventlog import EventLog
from sparkpoint.producer import write_trades
from tests.support import all_published, caught_up, expected_vwap, get_json, wait_until, worker_status
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


def test_worker_killed_mid_checkpoint_and_at_random_points_recovers_exactly(make_stack):
    seed = int(os.environ.get("SP_TEST_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    print(f"kill schedule seed: SP_TEST_SEED={seed}")
    stack = make_stack(workers=1, SP_CHECKPOINT_FREQ="1000", **FAST)
    log = EventLog.create(stack.config.log_dir / "trades", PARTITIONS)
    events = write_trades(log, 6000, seed=seed)
    stack.start_controller()

    # 1. The worker SIGKILLs itself while writing its 3rd checkpoint (files
    #    copied, manifest not yet written): that checkpoint must not exist.
    first = stack.start_worker(0, SP_TEST_FAULT="checkpoint.blobs_copied:3")
    wait_until(lambda: process_exited(first), timeout_s=240, what="the fault sentinel to kill the worker")
    store = CheckpointStore(stack.config.checkpoint_dir(0))
    durable = store.checkpoint_ids()
    assert durable == [1, 2], f"only the two completed checkpoints are durable, found {durable}"

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
    # Checkpoint ids kept strictly increasing across the restarts; retention kept 3.
    ids = store.checkpoint_ids()
    assert ids == sorted(ids) and len(ids) <= 3 and ids[-1] > 3


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


def three_unpublished_checkpoints(make_stack, seed: int):
    """A worker that processed and published its first events, then took
    three more durable checkpoints while the controller was down: none of
    them completed, so none is published, and a restore may fall back past
    any of them (never past a published one). Returns the stack, the log,
    the store, every event written and the published checkpoint."""
    stack = make_stack(workers=1, SP_CHECKPOINT_FREQ="500", **FAST)
    log = EventLog.create(stack.config.log_dir / "trades", PARTITIONS)
    events = write_trades(log, 1500, seed=seed)
    stack.start_controller()
    stack.start_worker(0)
    store = CheckpointStore(stack.config.checkpoint_dir(0))
    wait_until(lambda: caught_up(stack, log, QUERIES) and all_published(get_json(stack.config.status_url, stack.config.api_token)),
               timeout_s=240, what="the first events processed and published")
    stack.kill("controller")
    published = store.checkpoint_ids()[-1]
    events += write_trades(log, 1500, seed=seed + 1)
    wait_until(lambda: len([i for i in store.checkpoint_ids() if i > published]) >= 3, timeout_s=240,
               what="three durable checkpoints while the controller is down")
    return stack, log, store, events, published


def test_corrupt_checkpoints_are_named_and_skipped_and_a_second_worker_is_fenced(make_stack):
    stack, log, store, events, published = three_unpublished_checkpoints(make_stack, seed=11)

    # A second worker on the same checkpoint directory is refused while the first lives.
    second = subprocess.run(
        [sys.executable, "-m", "worker"], cwd=stack.config.pipeline.parents[1], capture_output=True, text=True,
        timeout=60, env={**stack._base_env(), "SP_WORKER_INDEX": "0",
                         "SP_CHECKPOINT_DIR": str(stack.config.checkpoint_dir(0))})
    assert second.returncode == 2
    assert str(stack.config.checkpoint_dir(0)) in second.stderr and "in use" in second.stderr
    assert "Traceback" not in second.stderr

    assert stack.stop("worker-0") == 0
    newest, middle, oldest = (store.load(i) for i in store.checkpoint_ids()[-1:-4:-1])
    assert oldest.checkpoint_id > published
    # Truncate the newest manifest; flip a byte in a file only the middle one holds.
    path = store.manifest_path(newest.checkpoint_id)
    path.write_bytes(path.read_bytes()[:40])
    only_middle = next(e for q in middle.queries for e in q.files.values()
                       if e.sha256 not in oldest.digests())
    blob = store.blob_path(only_middle.sha256)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))

    stack.start_controller()
    stack.start_worker(0)
    final = wait_until(lambda: caught_up(stack, log, QUERIES), timeout_s=300, what="the worker to process the whole log")
    assert final["recovery"]["restored_checkpoint_id"] == oldest.checkpoint_id
    worker_log = stack.services["worker-0"].log_path.read_text()
    assert f"{newest.checkpoint_id:012d}.json: not a valid checkpoint manifest" in worker_log
    assert f"checkpoint {middle.checkpoint_id} is corrupt" in worker_log and "checksum" in worker_log
    assert sorted(p.name for p in (store.root / "quarantine").iterdir()) == \
        [f"{middle.checkpoint_id:012d}.json", f"{newest.checkpoint_id:012d}.json"]
    check_output(stack, events)


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
    store.write_manifest(replace(manifest, queries=tuple(
        replace(q, files={p: e for p, e in q.files.items() if p != lost[q.name]}) for q in manifest.queries)))
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
