"""Worker recovery on the compose stack (not part of the test suite).

    .venv/bin/python bench/docker_recovery.py [--kills 5] [--checkpoint-freq 1000]

Builds the images (cached), starts a stack of its own, then crashes a worker
container ``--kills`` times, alternating workers, and times each crash -> the
restarted worker's first new committed batch (its batch id past the one it
restored). A crash is a SIGKILL of the container's init process, which the
restart policy handles (``docker kill`` is a manual stop to Docker: the
restart policy ignores it). Also times ``compose up`` -> every worker running.

Prints a table and writes it to bench/results/docker_recovery.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.report import publish_table, spread_row  # noqa: E402
from sparkpoint.devstack import free_port  # noqa: E402
from tests.chaos.compose import REPO, ComposeStack  # noqa: E402
from tests.support import new_run_processed, wait_until  # noqa: E402


def running(stack: ComposeStack, index: int) -> dict | None:
    worker = stack.worker(index)
    return worker if worker and worker["state"] == "running" and worker["last_checkpoint"] else None


def crash_to_first_batch(stack: ComposeStack, index: int) -> float:
    before = wait_until(lambda: running(stack, index), timeout_s=600, what=f"worker-{index} running")
    restarts = stack.restart_count(f"worker-{index}")
    crashed = time.monotonic()
    stack.crash(f"worker-{index}")
    wait_until(lambda: stack.restart_count(f"worker-{index}") > restarts, timeout_s=60,
               what=f"worker-{index} restarted by its policy", interval_s=0.1)

    wait_until(lambda: new_run_processed(stack.worker(index), before), timeout_s=600,
               what=f"worker-{index}'s first batch after the crash", interval_s=0.1)
    return time.monotonic() - crashed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--checkpoint-freq", type=int, default=1000, help="SP_CHECKPOINT_FREQ (ms)")
    args = parser.parse_args()
    subprocess.run(["make", "images"], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    stack = ComposeStack(f"spbench{uuid.uuid4().hex[:8]}", {
        "SP_CHECKPOINT_FREQ": str(args.checkpoint_freq), "SP_TRIGGER_INTERVAL": "500",
        "SP_REPORT_INTERVAL": "250", "SP_PRODUCER_RATE": "200"}, free_port())
    times: list[float] = []
    try:
        started = time.monotonic()
        stack.up("controller", "producer", "worker-0", "worker-1")
        for index in (0, 1):
            wait_until(lambda: running(stack, index), timeout_s=600, what=f"worker-{index} running")
        startup = time.monotonic() - started
        for kill in range(args.kills):
            seconds = crash_to_first_batch(stack, kill % 2)
            times.append(seconds)
            print(f"crash {kill + 1}: worker-{kill % 2} back with a new batch after {seconds:.1f} s", flush=True)
    finally:
        stack.down()
    lines = [
        f"# Worker recovery on Docker (SP_CHECKPOINT_FREQ={args.checkpoint_freq}, 2 workers, 2 cores)",
        "",
        "| measure | median | min | max |",
        "|---|---|---|---|",
        f"| compose up -> both workers running with a checkpoint (s) | {startup:.1f} | | |",
        spread_row(f"crash -> first new committed batch (s), {len(times)} crashes", times, ".1f"),
    ]
    publish_table("docker_recovery", lines)


if __name__ == "__main__":
    main()
