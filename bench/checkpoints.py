"""Checkpoint benchmarks, side by side in one run (not part of the test suite).

    .venv/bin/python bench/checkpoints.py [--events 60000] [--rounds 3] [--kills 5]

1. Throughput of the example pipeline over a pre-written log, one worker,
   with checkpoints every 1 s versus disabled; the modes alternate round by
   round so machine noise hits both alike. Events/s is counted from the
   worker's first committed batch to the moment it has read the whole log,
   so Spark's start-up is left out.
2. Recovery: SIGKILL the worker (producer running, checkpoints every 1 s) and
   time kill -> the restarted worker's first committed batch.

Prints a table and writes it to bench/results/checkpoints.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.report import publish_table, spread_row  # noqa: E402
from sparkpoint.devstack import LocalStack, StackConfig, free_port  # noqa: E402
from sparkpoint.eventlog import EventLog, committed_end  # noqa: E402
from sparkpoint.producer import write_trades  # noqa: E402
from tests.support import get_json, new_run_processed, wait_until  # noqa: E402

QUERIES = {"enriched_out", "vwap_out"}


def new_stack(root: Path, **env: str) -> LocalStack:
    return LocalStack(StackConfig(root=root, workers=1, grpc_port=free_port(), http_port=free_port(), env=env))


def worker(stack: LocalStack) -> dict | None:
    workers = get_json(stack.config.status_url, stack.config.api_token).get("workers", [])
    return workers[0] if workers else None


def throughput(root: Path, events: int, freq_ms: int) -> float:
    stack = new_stack(root, SP_CHECKPOINT_FREQ=str(freq_ms), SP_MAX_RECORDS_PER_BATCH="5000",
                      SP_TRIGGER_INTERVAL="0")
    log = EventLog.create(stack.config.log_dir / "trades", 2)
    write_trades(log, events)
    ends = {str(p): committed_end(log.path(p), 0) for p in range(2)}
    try:
        stack.start_controller()
        stack.start_worker(0)
        wait_until(lambda: (w := worker(stack)) and w["batch_id"] >= 0, timeout_s=300, what="a first batch",
                   interval_s=0.1)
        first = time.monotonic()
        wait_until(lambda: (w := worker(stack)) and set(w["offsets"]) == QUERIES
                   and all(o == ends for o in w["offsets"].values()), timeout_s=900, what="the whole log",
                   interval_s=0.1)
        return events / (time.monotonic() - first)
    finally:
        stack.stop_all()


def recovery_times(root: Path, kills: int) -> list[float]:
    stack = new_stack(root, SP_CHECKPOINT_FREQ="1000", SP_PRODUCER_RATE="500", SP_TRIGGER_INTERVAL="500")
    times = []
    try:
        stack.start_controller()
        stack.start_producer()
        stack.start_worker(0)
        for _ in range(kills):
            before = wait_until(lambda: (w := worker(stack)) and w["state"] == "running" and w["last_checkpoint"]
                                and w, timeout_s=300, what="a running worker with a checkpoint")
            killed = time.monotonic()
            stack.kill("worker-0")
            stack.start_worker(0)
            wait_until(lambda: new_run_processed(worker(stack), before), timeout_s=300,
                       what="the first batch after restart", interval_s=0.1)
            times.append(time.monotonic() - killed)
    finally:
        stack.stop_all()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=60000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kills", type=int, default=5)
    args = parser.parse_args()
    results: dict[str, list[float]] = {"checkpoints every 1 s": [], "checkpoints disabled": []}
    with tempfile.TemporaryDirectory(prefix="sp-bench-") as tmp:
        for round_ in range(args.rounds):
            for label, freq in (("checkpoints every 1 s", 1000), ("checkpoints disabled", 0)):
                rate = throughput(Path(tmp) / f"{round_}-{freq}", args.events, freq)
                results[label].append(rate)
                print(f"round {round_ + 1}: {label}: {rate:,.0f} events/s", flush=True)
        kills = recovery_times(Path(tmp) / "recovery", args.kills)
    on, off = (statistics.median(results[k]) for k in results)
    lines = [
        f"# Checkpoint benchmarks ({args.events} events, {args.rounds} rounds, 1 worker, 2 cores)",
        "",
        "| measure | median | min | max |",
        "|---|---|---|---|",
        *(spread_row(f"throughput, {k} (events/s)", v, ",.0f") for k, v in results.items()),
        f"| throughput ratio, checkpoints on / off | {on / off:.2f} | | |",
        spread_row(f"kill -> first new committed batch (s), {len(kills)} kills", kills, ".1f"),
    ]
    publish_table("checkpoints", lines)


if __name__ == "__main__":
    main()
