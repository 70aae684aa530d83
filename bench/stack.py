"""The default compose stack under a steady producer: CPU per container,
checkpoints, lag and event -> sink latency (issue 12's targets; not part of
the test suite).

    .venv/bin/python bench/stack.py [--rate 200] [--seconds 60] [--settle 360] [--backlog EVENTS]
        [--set SP_X=V ...]

Builds the images (``make images``; cached) and pins the ones it built under a
tag of its own, so a build from elsewhere cannot change them mid-run; starts
docker-compose.yml as it ships (its own project name and REST port; its
standby included, one worker unless ``--set SP_WORKER_COUNT=2``), the
producer at ``--rate`` events/s; waits until every
worker runs with a checkpoint and the standby has rehearsed, then
``--settle`` seconds more (``--set`` overrides a variable docker-compose.yml
reads, as a ``.env`` file would); then samples for ``--seconds``:

(The steady state: the worker's JVM leaves C2 to code ten times hotter than
the JVM's own thresholds, so at a trickle its JIT compiles for minutes. At
200 events/s the aggregate query costs 0.32 cores in its second minute and
0.21-0.23 from its sixth on, the JIT then a few ms a batch:
bench/results/trigger_cost-2026-12-03-h. The default ``--settle`` of 360 s
samples after that; a shorter one measures the warm-up.)

- CPU per container from its cgroup's cumulative usage (cpuacct, or the
  Docker stats API where that file is absent): mean cores, and the busiest
  10 s;
- CPU per thread of each worker container (its JVM's threads by what they
  do: query threads, tasks, scheduling, JIT, GC, listeners; its Python),
  from the host's /proc;
- memory per container as ``docker stats`` shows it, its highest from the
  stack's start to the end (sampled every 0.5 s), and restarts;
- from the controller: each worker's checkpoints (durations from /history),
  dropped ones, rows processed, input lag (/status);
- event -> visible latency, the producer's ``time`` stamp against when the
  bench first saw the event: in the files sink (published Parquet on the
  ``output`` volume; transactional) and in the ``vwap`` upsert table (a
  symbol's count reaching the event's rank).

``--backlog N`` writes N events to the new log before the stack starts (the
producer's code, without its CPU limit): the workers start into a replay of
batches at the per-batch cap, as after a long outage. The bench then waits
until every worker has read the log to its end (catch-up seconds and events/s)
before the steps above.

Then it stops the producer, waits until every worker has read the log to
its end and published its last batch, and compares the input with both
sinks (every event id once in the files output and in PostgreSQL's
``trades_enriched``, and the ``vwap`` table's trade counts, volumes and
notionals against a batch computation over the log), as the chaos tests do.

The machine's speed, which moves the figures more than most changes do,
is timed before the stack starts and after it is down (``python_loop_s``)
and printed with them.

Prints a table, writes bench/results/stack-<rate>-<date>.md and .json (-b,
-c, ... when that day has one already), and
tears the stack down (volumes included).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.measure import (  # noqa: E402
    cores_used,
    cpu_by_group,
    memory_in_use,
    peak_cores,
    percentile,
    thread_stat,
    upsert_latencies,
)
from bench.report import publish_json, publish_table, python_loop_s, unused_name  # noqa: E402
from bench.throughput import parse_settings  # noqa: E402
from sparkpoint.devstack import free_port  # noqa: E402
from tests.chaos.compose import REPO, ComposeStack  # noqa: E402
from tests.support import all_published, get_json, vwap_differences, wait_until  # noqa: E402
from worker.publishing.targets.files import published_files  # noqa: E402

IMAGES = ("controller", "worker", "postgres")
_TICKS = {"s": 1, "ms": 1e3, "us": 1e6, "ns": 1e9}


def pin_images(tag: str) -> None:
    """Tag the images ``make images`` just built (build/images/*.ref) as ``tag``."""
    for name in IMAGES:
        ref = (REPO / "build" / "images" / f"{name}.ref").read_text().strip()
        subprocess.run(["docker", "tag", ref, f"sparkpoint-{name}:{tag}"], check=True)


def unpin_images(tag: str) -> None:
    subprocess.run(["docker", "rmi", *(f"sparkpoint-{name}:{tag}" for name in IMAGES)], check=False,
                   capture_output=True)


class CpuMeter:
    """Cumulative CPU nanoseconds of one container."""

    def __init__(self, container) -> None:
        self.container = container
        self.path = Path(f"/sys/fs/cgroup/cpuacct/docker/{container.id}/cpuacct.usage")

    def read(self) -> int:
        if self.path.exists():
            return int(self.path.read_text())
        return self.container.stats(stream=False, one_shot=True)["cpu_stats"]["cpu_usage"]["total_usage"]


def container_threads(container) -> dict[tuple[str, str], tuple[str, str, int]]:
    """CPU ticks of every thread of the container's processes, read from the
    host's /proc: ``{(pid, tid): (process name, thread name, ticks)}``."""
    snapshot = {}
    for row in container.top(ps_args="-eo pid")["Processes"]:
        pid = row[0]
        try:
            process = Path(f"/proc/{pid}/comm").read_text().strip()
            for task in Path(f"/proc/{pid}/task").iterdir():
                snapshot[(pid, task.name)] = (process, *thread_stat((task / "stat").read_text()))
        except FileNotFoundError:
            continue        # a process or thread that ended meanwhile
    return snapshot


class MemoryMeter:
    """One container's memory in use, as ``docker stats`` shows it."""

    def __init__(self, container) -> None:
        self.container = container
        self.directory = Path(f"/sys/fs/cgroup/memory/docker/{container.id}")
        self.limit = container.attrs["HostConfig"]["Memory"]

    def read(self) -> int:
        if self.directory.exists():
            usage = int((self.directory / "memory.usage_in_bytes").read_text())
            stat = dict(line.split() for line in (self.directory / "memory.stat").read_text().splitlines())
            return memory_in_use(usage, {key: int(value) for key, value in stat.items()})
        memory = self.container.stats(stream=False, one_shot=True)["memory_stats"]
        return memory_in_use(memory["usage"], memory.get("stats", {}))


class MemoryPeaks:
    """Samples every container's memory every ``interval_s`` in a thread of
    its own, from ``start()`` to ``stop()``; keeps each one's highest."""

    def __init__(self, meters: dict[str, MemoryMeter], interval_s: float = 0.5) -> None:
        self.meters = meters
        self.interval_s = interval_s
        self.peaks = dict.fromkeys(meters, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join()
        return self.peaks

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            for name, meter in self.meters.items():
                try:
                    self.peaks[name] = max(self.peaks[name], meter.read())
                except (FileNotFoundError, KeyError):
                    pass            # a container between a crash and its restart


def write_backlog(stack: ComposeStack, tag: str, events: int) -> None:
    """``events`` trades appended to the stack's (new) event log before
    anything reads it: the producer's own code, run once without the
    service's CPU limit and as fast as it goes."""
    stack.compose("up", "--no-start")       # creates the volumes
    stack.client.containers.run(
        f"sparkpoint-controller:{tag}", ["python", "-m", "sparkpoint.producer"], remove=True, network_mode="none",
        environment={"SP_PRODUCER_RATE": "1000000", "SP_PRODUCER_COUNT": str(events)},
        volumes={f"{stack.project}_eventlog": {"bind": "/var/lib/sparkpoint/log", "mode": "rw"}})


def worker_services(overrides: dict[str, str]) -> tuple[str, ...]:
    """The stack's worker services at its ``SP_WORKER_COUNT`` (docker-compose.yml's default: 1)."""
    return tuple(f"worker-{index}" for index in range(int(overrides.get("SP_WORKER_COUNT", "1"))))


def stack_env(overrides: dict[str, str]) -> dict[str, str]:
    """The overrides, and the profile that runs worker-1 when there are two workers."""
    return {**overrides, **({"COMPOSE_PROFILES": "scale-out"} if len(worker_services(overrides)) > 1 else {})}


def caught_up(stack: ComposeStack, polls: list[tuple[float, dict]], workers: int) -> bool:
    """Every worker runs and has read the log to its end; notes the poll."""
    status = stack.status()
    polls.append((time.monotonic(), status))
    running = status.get("workers", [])
    return len(running) == workers and all(w["state"] == "running" and w["lag_bytes"] == 0 for w in running)


def catch_up(polls: list[tuple[float, dict]], started: float, events: int) -> dict:
    """Seconds from the stack's start to every worker at the log's end, and
    the backlog's events/s from the first processed row on."""
    done = polls[-1][0]
    first = next(at for at, status in polls if sum(w["rows_processed"] for w in status.get("workers", [])) > 0)
    return {"events": events, "seconds": done - started,
            "events_per_s": events / (done - first) if done > first else float("nan")}


def volume_path(stack: ComposeStack, volume: str) -> Path:
    return Path(stack.client.volumes.get(f"{stack.project}_{volume}").attrs["Mountpoint"])


class SinkSampler:
    """Polls the files sink's published batches and the upsert table every
    ``interval_s``; notes when each event (files) or each symbol's count
    (upsert) first showed, from ``start()`` on. Each sink's poll is timed
    just before it reads that sink. A latency reads up to an interval too
    late, so the interval is 50 ms, as in bench/sinks.py (at 200 ms the
    error could reach a fifth of the upsert's 1 s target)."""

    def __init__(self, output: Path, pg_host: str, pg_password: str, interval_s: float = 0.05) -> None:
        self.output = output
        self.pg_host = pg_host
        self.pg_password = pg_password
        self.interval_s = interval_s
        self.files_latency: list[float] = []
        self.counts: dict[str, list[tuple[int, float]]] = {}     # sym -> (trades, first seen) as it grew
        self.errors: list[str] = []
        self._seen: set[Path] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._seen = {p for batches in published_files(self.output).values() for ps in batches.values() for p in ps}
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        import psycopg
        import pyarrow.parquet as pq

        try:
            conn = psycopg.connect(host=self.pg_host, dbname="sparkpoint", user="sparkpoint",
                                   password=self.pg_password, autocommit=True, connect_timeout=5)
        except psycopg.Error as error:
            conn = None         # files only
            self.errors.append(f"PostgreSQL at {self.pg_host}: {str(error).strip()}")
        while not self._stop.wait(self.interval_s):
            now = time.time()
            for batches in published_files(self.output).values():
                for path in (p for paths in batches.values() for p in paths if p not in self._seen):
                    self._seen.add(path)
                    column = pq.read_table(path, columns=["time"]).column("time")
                    per_second = _TICKS[column.type.unit]   # Spark's own writer stores nanoseconds (INT96)
                    self.files_latency += [now - t / per_second for t in column.cast("int64").to_pylist()]
            if conn is None:
                continue
            now = time.time()
            try:
                for sym, trades in conn.execute("SELECT sym, trades FROM vwap"):
                    shown = self.counts.setdefault(sym, [])
                    if not shown or trades > shown[-1][0]:
                        shown.append((trades, now))
            except psycopg.Error as error:
                self.errors.append(str(error).strip())
        if conn is not None:
            conn.close()


def event_times(log: Path) -> dict[str, list[float]]:
    """Each symbol's events' append times, in order (one symbol lives in one partition)."""
    import pyarrow as pa
    import pyarrow.json as pa_json

    schema = pa.schema([("sym", pa.string()), ("time", pa.timestamp("us", tz="UTC"))])
    times: dict[str, list[float]] = {}
    for path in sorted(log.glob("p-*.jsonl")):
        data = path.read_bytes()
        data = data[:data.rfind(b"\n") + 1]
        table = pa_json.read_json(pa.BufferReader(data), parse_options=pa_json.ParseOptions(
            explicit_schema=schema, unexpected_field_behavior="ignore"))
        for sym, at in zip(table.column("sym").to_pylist(), table.column("time").cast("int64").to_pylist()):
            times.setdefault(sym, []).append(at / 1e6)
    return times


def steady(stack: ComposeStack, workers: int) -> bool:
    """Every worker runs with a checkpoint, and the standby has rehearsed."""
    status = stack.status()
    running, standbys = status.get("workers", []), status.get("standbys", [])
    return (len(running) == workers and all(w["state"] == "running" and w["last_checkpoint"] for w in running)
            and len(standbys) == 1 and standbys[0]["state"] == "ready")


def sample(stack: ComposeStack, seconds: float, meters: dict[str, CpuMeter], worker_names: tuple[str, ...]) -> dict:
    cpu: dict[str, list[tuple[float, int]]] = {name: [] for name in meters}
    statuses: list[tuple[float, dict]] = []
    workers = {name: stack.container(name) for name in worker_names}
    threads = {name: container_threads(container) for name, container in workers.items()}
    started = time.monotonic()
    end = started + seconds
    while True:
        now = time.monotonic()
        for name, meter in meters.items():
            cpu[name].append((now, meter.read()))
        statuses.append((time.time(), stack.status()))
        if now >= end:
            break
        time.sleep(min(1.0, max(0.0, end - now)))   # the sampling period
    elapsed = time.monotonic() - started
    by_thread = {name: cpu_by_group(threads[name], container_threads(container), os.sysconf("SC_CLK_TCK"), elapsed)
                 for name, container in workers.items()}
    return {"cpu": cpu, "statuses": statuses, "threads": by_thread}


def drained(status: dict) -> bool:
    """Every worker has read the log to its end and published its last batch."""
    return all_published(status) and all(w["lag_bytes"] == 0 for w in status["workers"])


def exactly_once(stack: ComposeStack) -> dict:
    """Stop the producer; once drained, the input against both sinks."""
    stack.compose("stop", "-t", "10", "producer")
    wait_until(lambda: drained(stack.status()), timeout_s=600, what="every worker drained and published",
               interval_s=2)
    results = stack.results()
    return {"events": results["events"], "distinct_events": results["distinct_events"],
            "files": results["files"], "pg": results["pg"],
            "vwap_differences": vwap_differences(results["pg_vwap"], results["expected_vwap"])}


def summarise(samples: dict, history: dict) -> dict:
    cpu = {name: {"cores": cores_used(s), "peak_10s": peak_cores(s, 10.0)} for name, s in samples["cpu"].items()}
    (t0, first), (t1, last) = samples["statuses"][0], samples["statuses"][-1]
    workers = {}
    for w0, w1 in zip(first["workers"], last["workers"]):
        wid = w0["worker_id"]
        durations = [c["duration_s"] * 1000 for c in history["workers"].get(wid, {}).get("checkpoints", [])
                     if t0 <= c["at"] <= t1]
        lags = [next(w["lag_bytes"] for w in s["workers"] if w["worker_id"] == wid) for _, s in samples["statuses"]]
        workers[wid] = {
            "checkpoints": w1["checkpoints_completed"] - w0["checkpoints_completed"],
            "dropped": w1["dropped_checkpoints"] - w0["dropped_checkpoints"],
            "failed": w1["failed_checkpoints"] - w0["failed_checkpoints"],
            "checkpoint_ms": durations,
            "rows_per_s": (w1["rows_processed"] - w0["rows_processed"]) / (t1 - t0),
            "lag_bytes": {"first": lags[0], "last": lags[-1], "max": max(lags)},
            "registrations": w1["registrations"],
        }
    return {"cpu": cpu, "workers": workers, "threads": samples["threads"]}


def listed(ids: list) -> str:
    """How many ids a results list holds (it holds at most 20 of them)."""
    return f"{len(ids)}+" if len(ids) >= 20 else str(len(ids))


def vwap_verdict(differences: list[str]) -> str:
    """What the drained vwap table is, against a batch computation over the log."""
    if not differences:
        return "equals a batch computation over the log (trades, volumes, notionals)"
    shown = "; ".join(differences[:5])
    return f"DIFFERS from a batch computation over the log: {shown}{' ...' if len(differences) > 5 else ''}"


def table(args: argparse.Namespace, summary: dict, latency: dict[str, list[float]], once: dict,
          overrides: dict[str, str]) -> list[str]:
    cpu, memory = summary["cpu"], summary["memory"]
    backlog = summary["backlog"]
    loop_before, loop_after = summary["python_loop_s"]
    lines = [f"# The default compose stack at {args.rate:,} events/s ({args.seconds} s sampled after "
             f"{args.settle} s settling, 2 cores)", "", f"Command: `{' '.join(sys.argv)}`", "",
             f"Settings overridden: {', '.join(f'{k}={v}' for k, v in overrides.items()) or 'none'}", "",
             f"Machine: a Python loop of 20 M additions took {loop_before:.2f} s before the stack, "
             f"{loop_after:.2f} s after", ""]
    if backlog:
        lines += [f"Backlog: {backlog['events']:,} events in the log before the stack started. Every worker "
                  f"had read it {backlog['seconds']:.0f} s after `up`: {backlog['events_per_s']:,.0f} events/s "
                  "from the first processed row.", ""]
    lines += ["| container | cores (mean) | cores (busiest 10 s) | memory, highest (MiB) | limit (MiB) | restarts |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {name} | {c['cores']:.2f} | {c['peak_10s']:.2f} | {memory[name]['peak'] / 2**20:,.0f} "
              f"| {memory[name]['limit'] / 2**20:,.0f} | {memory[name]['restarts']} |" for name, c in cpu.items()]
    lines.append(f"| **total** | **{sum(c['cores'] for c in cpu.values()):.2f}** | | | | |")
    threads = summary["threads"]
    groups = sorted({group for cores in threads.values() for group in cores},
                    key=lambda group: -sum(cores.get(group, 0.0) for cores in threads.values()))
    lines += ["", "Where the workers' CPU went (cores, by thread, over the window):", "",
              f"| threads | {' | '.join(threads)} |", f"|---|{'---|' * len(threads)}"]
    lines += [f"| {group} | {' | '.join(f'{cores.get(group, 0.0):.3f}' for cores in threads.values())} |"
              for group in groups]
    lines += ["", "| worker | rows/s | checkpoints | dropped | failed | ckpt p50 / p99 (ms) | lag bytes first / last "
              "/ max | registrations |", "|---|---|---|---|---|---|---|---|"]
    for wid, w in summary["workers"].items():
        d = w["checkpoint_ms"]
        lag = w["lag_bytes"]
        lines.append(f"| {wid} | {w['rows_per_s']:,.0f} | {w['checkpoints']} | {w['dropped']} | {w['failed']} "
                     f"| {percentile(d, 0.5):.0f} / {percentile(d, 0.99):.0f} | {lag['first']:,} / {lag['last']:,} "
                     f"/ {lag['max']:,} | {w['registrations']} |")
    lines += ["", "| event appended -> visible | p50 (s) | p99 (s) | events |", "|---|---|---|---|"]
    lines += [f"| {sink} | {percentile(v, 0.5):.2f} | {percentile(v, 0.99):.2f} | {len(v):,} |"
              for sink, v in latency.items()]
    lines += ["", f"Drained (producer stopped): {once['events']:,} events appended ({once['distinct_events']:,} "
              f"distinct ids); the vwap table {vwap_verdict(once['vwap_differences'])}.", "",
              "| sink | ids missing | ids twice | ids never produced |", "|---|---|---|---|"]
    lines += [f"| {where} | {once[sink]['missing']:,} | {listed(once[sink]['duplicated'])} "
              f"| {listed(once[sink]['unknown'])} |"
              for sink, where in (("files", "files (trades_enriched)"), ("pg", "PostgreSQL trades_enriched"))]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=200, help="producer events/s")
    parser.add_argument("--seconds", type=int, default=60, help="sampling window")
    parser.add_argument("--settle", type=int, default=360,
                        help="seconds after every worker runs with a checkpoint (default: past the JIT's warm-up)")
    parser.add_argument("--set", action="append", default=[], metavar="SP_X=V",
                        help="a variable docker-compose.yml reads (repeatable)")
    parser.add_argument("--backlog", type=int, default=0, metavar="EVENTS",
                        help="events in the log before the stack starts (a recovery's replay, at the per-batch cap)")
    args = parser.parse_args()
    overrides = parse_settings(args.set)
    workers = worker_services(overrides)
    services = ("controller", *workers, "standby", "producer", "postgres")
    subprocess.run(["make", "images"], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    speed = [python_loop_s()]
    tag = f"bench-{uuid.uuid4().hex[:8]}"
    pin_images(tag)
    stack = ComposeStack(f"spbench{uuid.uuid4().hex[:8]}", {**stack_env(overrides), "SP_PRODUCER_RATE": str(args.rate),
                                                             "SP_IMAGE_TAG": tag}, free_port())
    backlog = None
    try:
        if args.backlog:
            write_backlog(stack, tag, args.backlog)
        stack.up(*services)
        up_at = time.monotonic()
        memory = MemoryPeaks({name: MemoryMeter(stack.container(name)) for name in services})
        memory.start()
        if args.backlog:
            polls: list[tuple[float, dict]] = []
            wait_until(lambda: caught_up(stack, polls, len(workers)), timeout_s=1800,
                       what="every worker through the backlog",
                       interval_s=1)
            backlog = catch_up(polls, up_at, args.backlog)
        wait_until(lambda: steady(stack, len(workers)), timeout_s=600,
                   what="every worker running with a checkpoint, the standby ready",
                   interval_s=1)
        time.sleep(args.settle)     # let the start-up backlog drain before measuring
        meters = {name: CpuMeter(stack.container(name)) for name in services}
        pg = stack.container("postgres").attrs["NetworkSettings"]["Networks"][f"{stack.project}_data"]
        sampler = SinkSampler(volume_path(stack, "output") / "trades_enriched", pg["IPAddress"],
                              (stack.secrets / "postgres-password").read_text().strip())
        sampler.start()
        started = time.time()
        samples = sample(stack, args.seconds, meters, workers)
        time.sleep(5)       # events of the window's end still on their way to the sinks
        sampler.stop()
        history = get_json(stack.status_url.replace("/status", "/history"), stack.api_token)
        times = event_times(volume_path(stack, "eventlog") / "trades")
        once = exactly_once(stack)
        peaks = memory.stop()
        memory_summary = {name: {"peak": peaks[name], "limit": meter.limit, "restarts": stack.restart_count(name)}
                          for name, meter in memory.meters.items()}
    finally:
        stack.down()
        unpin_images(tag)
    speed.append(python_loop_s())
    summary = {**summarise(samples, history), "memory": memory_summary, "backlog": backlog,
               "python_loop_s": speed}
    latency = {"files (transactional)": sampler.files_latency,
               "PostgreSQL upsert (vwap)": upsert_latencies(sampler.counts, times, started, samples["statuses"][-1][0])}
    kind = f"stack-{args.rate}" + (f"-backlog-{args.backlog}" if args.backlog else "")
    name = unused_name(f"{kind}-{time.strftime('%Y-%m-%d')}")
    publish_table(name, table(args, summary, latency, once, overrides))
    publish_json(name, {"rate": args.rate, "seconds": args.seconds, "settle": args.settle, "backlog": args.backlog,
                        "overrides": overrides,
                        "summary": summary,
                        "latency": {k: {"p50": percentile(v, 0.5), "p99": percentile(v, 0.99), "n": len(v),
                                        "mean": statistics.fmean(v) if v else None} for k, v in latency.items()},
                        "sink_errors": sampler.errors[:5], "exactly_once": once})


if __name__ == "__main__":
    main()
