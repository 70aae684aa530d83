"""Worker recovery on the compose stack (not part of the test suite).

    .venv/bin/python bench/docker_recovery.py [--kills 5] [--checkpoint-freq 1000] [--standby 1]
                                              [--trigger-interval 1000]

Builds the images (cached), starts a stack of its own, scaled out to two
workers, with ``--standby`` warm standby containers (``SP_STANDBY``), then
crashes the container running a worker index ``--kills`` times, alternating
indices, and times each crash
-> the index's first new committed batch (its batch id past the one it
restored). A crash is a SIGKILL of the container's init process, which the
restart policy handles (``docker kill`` is a manual stop to Docker: the
restart policy ignores it). Also times ``compose up`` -> every worker running.

With a standby, the standby takes the index over; each crash is broken
down from its log lines: detection (the crashed worker's lock taken),
registration (the hand-over), restore, queries started, first new batch.

Without one, each crash is broken down into phases from the container's start time and
the restarted worker's own log lines (Docker's timestamps): Docker restarts
the container; the JVM and Spark session start; the pipeline's layout is
derived (a Spark analysis); the worker registers with the controller;
restores its checkpoint; starts its queries; and commits its first new batch.
The input replayed per crash is what the restarted run reads again: from its
restored checkpoint's offsets (its first report) to where the crashed run's
last report had got (reports every 250 ms: it may have got a little further),
in seconds of input at the rate measured over the ``RATE_WINDOW_S`` before
the crash (issue 13's target: at most 1.1 times the checkpoint interval).

Then fails a query ``--query-failures`` times, alternating workers: the
stack runs with the fault sentinel ``SP_TEST_FAULT=staging.commit:armed``,
and the bench arms it in the worker's container, so the next batch a staged
sink commits raises (``sparkpoint/faults.py``); the worker restarts its
queries in its living Spark session. Timed failure ->
the worker's first new committed batch, in phases from its log lines: the
failure seen; the queries stopped (the restart decided); registration;
restore; queries started; first new batch.

Prints a table and writes it to bench/results/docker_recovery.md.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.report import publish_table, spread_row  # noqa: E402
from bench.stack import stack_env  # noqa: E402
from sparkpoint.devstack import free_port  # noqa: E402
from tests.chaos.compose import REPO, WORKER_SERVICES, ComposeStack, docker_time  # noqa: E402
from tests.support import new_run_processed, wait_until  # noqa: E402
from worker.lifecycle.restarts import STABLE_RUN_S  # noqa: E402


def running(stack: ComposeStack, index: int) -> dict | None:
    worker = stack.worker(index)
    return worker if worker and worker["state"] == "running" and worker["last_checkpoint"] else None


# Each phase ends at the first line of the restarted worker's log matching its pattern.
LOGGED_PHASES = (
    ("JVM and Spark session", re.compile(r"Spark session started in")),
    ("pipeline layout (Spark analysis)", re.compile(r"pipeline layout derived in")),
    ("registration with the controller", re.compile(r"registered as ")),
    ("checkpoint restore", re.compile(r"restored checkpoint ")),
    ("queries started", re.compile(r"running \d+ queries")),
)
PHASES = ("Docker restarts the container", *(name for name, _ in LOGGED_PHASES), "first new committed batch")
TAKEOVER_PHASES = (
    ("detection: the crashed worker's lock taken", re.compile(r"standby: taking over index ")),
    *LOGGED_PHASES[2:],
)
STANDBY_PHASES = (*(name for name, _ in TAKEOVER_PHASES), "first new committed batch")
RESTART_PHASES = (
    ("the failure seen by the worker", re.compile(r"query \S+ failed: ")),
    ("queries stopped, restart decided", re.compile(r"restart \d+: restoring")),
    *LOGGED_PHASES[2:],
)
QUERY_PHASES = (*(name for name, _ in RESTART_PHASES), "first new committed batch")
RATE_WINDOW_S = 5.0
FAULT = "staging.commit:armed"
ARM = "/var/lib/sparkpoint/checkpoints/{index}/.fault-staging.commit.arm"    # SP_CHECKPOINT_DIR in the compose file


class Recovered(NamedTuple):
    seconds: list[float]            # each phase's
    first_batches: list[str]        # the worker's log lines on each query's first batch with rows
    replayed_s: float = float("nan")    # input processed again, in seconds of input (crashes only)
    taken_over: bool = False        # by a standby (its phases are STANDBY_PHASES)


def source_end(worker: dict) -> int:
    """The bytes in the worker's partitions, as of its last report (its queries' furthest view)."""
    return max(sum(q["latest_offsets"].values()) for q in worker["queries"])


def processed(worker: dict) -> dict[str, int]:
    """Each query's position: the bytes of its partitions up to its last batch's end."""
    return {q["name"]: sum(q["offsets"].values()) for q in worker["queries"]}


def replayed_seconds(before: dict, last: dict, restored: dict[str, int]) -> float:
    """The input the restarted run reads again -- from the restored
    checkpoint's offsets to where the crashed run's last report had got,
    its furthest query's -- in seconds of input at the rate between the
    ``before`` and ``last`` reports (NaN if the restored offsets were never
    seen: the new run committed before a poll saw its restored batch)."""
    rate = (source_end(last) - source_end(before)) / (last["last_heartbeat"] - before["last_heartbeat"])
    if not restored or rate <= 0:
        return float("nan")
    return max(position - restored.get(name, position) for name, position in processed(last).items()) / rate


def worker_log(stack: ComposeStack, service: str, since: float) -> list[tuple[float, str]]:
    """The log lines of ``service``'s worker container after ``since``, each with Docker's time of it."""
    logs = stack.container(service).logs(timestamps=True, since=int(since)).decode(errors="replace")
    lines = []
    for line in logs.splitlines():
        stamp, _, text = line.partition(" ")
        if (at := docker_time(stamp)) > since:
            lines.append((at, text))
    return lines


def recovered(service: str, lines: list[tuple[float, str]], phases: tuple, seen: float, *known: float) -> Recovered:
    """From the first of the ``known`` moments (the crash, the failure; then
    any other known end, as the container's start) through each of the
    logged ``phases`` ending, in order, to ``seen`` (when the first new
    batch showed in ``/status``: before the bench's own Docker calls)."""
    ends = list(known)
    for name, pattern in phases:
        found = next((at for at, text in lines if at >= ends[-1] and pattern.search(text)), None)
        if found is None:
            raise AssertionError(f"{service}: no log line for the end of {name!r} ({pattern.pattern})")
        ends.append(found)
    ends.append(seen)
    return Recovered([later - earlier for earlier, later in zip(ends, ends[1:])],
                     [text for _, text in lines if "first batch with rows" in text])


def crash_to_first_batch(stack: ComposeStack, index: int) -> Recovered:
    """Each of ``PHASES`` (restarted) or ``STANDBY_PHASES`` (taken over)
    from the crash to the first new batch, and the input replayed."""
    before = wait_until(lambda: running(stack, index), timeout_s=600, what=f"worker-{index} running")
    time.sleep(RATE_WINDOW_S)       # a window to measure the input rate over, not a wait for anything
    last = stack.worker(index)
    victim = stack.runner_of(index)
    crashed = time.time()
    stack.crash(victim)
    restored: dict[str, int] = {}

    def first_new_batch() -> bool:
        worker = stack.worker(index)
        # The new run's own reports show its restored batch until it commits a
        # new one (registering keeps the crashed run's queries, as "starting").
        if (not restored and worker and worker["registrations"] > before["registrations"]
                and worker["state"] in ("running", "recovering") and worker["rows_processed"] == 0
                and worker["queries"]):
            restored.update(processed(worker))
        return new_run_processed(worker, before)

    wait_until(first_new_batch, timeout_s=600, what=f"worker-{index}'s first batch after the crash", interval_s=0.1)
    seen = time.time()
    heir = stack.runner_of(index)
    if heir != victim:
        run = recovered(heir, worker_log(stack, heir, crashed), TAKEOVER_PHASES, seen,
                        crashed)._replace(taken_over=True)
    else:
        container = stack.container(heir)
        container.reload()
        started = docker_time(container.attrs["State"]["StartedAt"])
        run = recovered(heir, worker_log(stack, heir, crashed), LOGGED_PHASES, seen, crashed, started)
    return run._replace(replayed_s=replayed_seconds(before, last, restored))


def fail_a_query(stack: ComposeStack, service: str, index: int) -> float:
    """Arm index ``index``'s fault sentinel in ``service``'s container, which
    runs it: its next staged batch fails its query; when."""
    failed = time.time()
    result = stack.container(service).exec_run(["touch", ARM.format(index=index)])
    assert result.exit_code == 0, f"{service}: could not arm the fault: {result.output!r}"
    return failed


def query_failure_to_first_batch(stack: ComposeStack, index: int) -> Recovered:
    """Each of ``QUERY_PHASES`` from a query's failure to the worker's first new batch."""
    before = wait_until(lambda: running(stack, index), timeout_s=600, what=f"worker-{index} running")
    service = stack.runner_of(index)
    failed = fail_a_query(stack, service, index)
    wait_until(lambda: new_run_processed(stack.worker(index), before), timeout_s=600,
               what=f"worker-{index}'s first batch after a query failed", interval_s=0.1)
    return recovered(service, worker_log(stack, service, failed), RESTART_PHASES, time.time(), failed)


def show(what: str, index: int, run: Recovered, phases: tuple[str, ...]) -> None:
    print("\n".join(run.first_batches))
    print(f"{what}: worker-{index} back with a new batch after {sum(run.seconds):.1f} s ("
          + ", ".join(f"{name} {seconds:.1f}" for name, seconds in zip(phases, run.seconds))
          + (f"; input replayed: {run.replayed_s:.2f} s of it" if run.replayed_s == run.replayed_s else "")
          + ")", flush=True)


def report(name: str, runs: list[list[float]], phases: tuple[str, ...]) -> list[str]:
    """Table rows: the total and each phase, median/min/max over ``runs``."""
    return [
        spread_row(f"{name} (s), {len(runs)} times", [sum(r) for r in runs], ".1f"),
        *(spread_row(f"  phase: {phase} (s)", [r[i] for r in runs], ".1f") for i, phase in enumerate(phases)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--query-failures", type=int, default=5)
    parser.add_argument("--checkpoint-freq", type=int, default=1000, help="SP_CHECKPOINT_FREQ (ms)")
    parser.add_argument("--standby", type=int, default=1, help="SP_STANDBY: warm standby containers")
    parser.add_argument("--trigger-interval", type=int, default=1000,
                        help="SP_TRIGGER_INTERVAL (ms; the shipped default: 1000)")
    args = parser.parse_args()
    subprocess.run(["make", "images"], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    stack = ComposeStack(f"spbench{uuid.uuid4().hex[:8]}", {
        "SP_CHECKPOINT_FREQ": str(args.checkpoint_freq), "SP_TRIGGER_INTERVAL": str(args.trigger_interval),
        "SP_REPORT_INTERVAL": "250", "SP_PRODUCER_RATE": "200",
        "SP_TEST_FAULT": FAULT, "SP_STANDBY": str(args.standby), **stack_env({"SP_WORKER_COUNT": "2"})}, free_port())
    crashes: list[list[float]] = []
    takeovers: list[list[float]] = []
    replays: list[float] = []
    failures: list[list[float]] = []
    try:
        started = time.monotonic()
        stack.up("controller", "producer", "worker-0", "worker-1", *(["standby"] if args.standby else []))
        for index in (0, 1):
            wait_until(lambda: running(stack, index), timeout_s=600, what=f"worker-{index} running")
        startup = time.monotonic() - started
        for kill in range(args.kills):
            if args.standby:
                wait_until(lambda: any(stack.standing_by(s) for s in WORKER_SERVICES), timeout_s=600,
                           what="a warm standby")
            run = crash_to_first_batch(stack, kill % 2)
            (takeovers if run.taken_over else crashes).append(run.seconds)
            replays.append(run.replayed_s)
            show(f"crash {kill + 1}" + (" (taken over)" if run.taken_over else ""), kill % 2, run,
                 STANDBY_PHASES if run.taken_over else PHASES)
        stable_at = {index: time.time() + STABLE_RUN_S for index in (0, 1)}
        for failure in range(args.query_failures):
            index = failure % 2
            # Isolated failures: one within STABLE_RUN_S of its run's start
            # counts as "in a row" to the restart policy, which backs off.
            time.sleep(max(0.0, stable_at[index] - time.time()))
            run = query_failure_to_first_batch(stack, index)
            stable_at[index] = time.time() + STABLE_RUN_S
            failures.append(run.seconds)
            show(f"query failure {failure + 1}", index, run, QUERY_PHASES)
    finally:
        stack.down()
    lines = [
        f"# Worker recovery on Docker (SP_CHECKPOINT_FREQ={args.checkpoint_freq}, "
        f"SP_TRIGGER_INTERVAL={args.trigger_interval}, SP_STANDBY={args.standby}, 2 workers, 2 cores)",
        "",
        "| measure | median | min | max |",
        "|---|---|---|---|",
        f"| compose up -> both workers running with a checkpoint (s) | {startup:.1f} | | |",
        *(report("container crash -> first new committed batch, a standby takes over", takeovers, STANDBY_PHASES)
          if takeovers else ()),
        *(report("container crash -> first new committed batch, the container restarted", crashes, PHASES)
          if crashes else ()),
        *((spread_row(f"input replayed per crash (s of input; seen in {len(seen)} of {len(replays)})",
                      seen, ".2f"),) if (seen := [r for r in replays if r == r]) else ()),
        *(report("query failure -> first new committed batch (restart in the living JVM)", failures,
                 QUERY_PHASES) if failures else ()),
    ]
    publish_table("docker_recovery", lines)


if __name__ == "__main__":
    main()
