"""Throughput of the example pipeline, Sparkpoint against plain PySpark, side
by side in one run (issue 12's targets; not part of the test suite).

    .venv/bin/python bench/throughput.py [--events 4000000] [--rounds 3] [--batch N] [--set SP_X=V ...]

The input, ``--events`` trades in the producer's format (an event log of 4
partitions, as sparkpoint/producer.py writes it) and the same lines as JSON
files, is written once into ``--cache``. Then, round by round, the variants
run one after the other, each on a fresh JVM and fresh checkpoints:

- ``spark``: plain PySpark, Spark's JSON file source (bench/spark_baseline.py),
  batches of about ``--batch`` events (default: the worker's shipped per-batch
  cap, so both sides get batches as large; at most a fifth of the input);
- ``spark-logsource``: the same through Sparkpoint's event log source;
- ``sparkpoint``: a controller and one worker (pipelines/trades.py) at the
  worker's shipped defaults, except checkpoints every 1 s (``--set``
  overrides further settings);
- ``sparkpoint-nockpt``: the same with checkpoints disabled (SP_CHECKPOINT_FREQ=0).

Events/s are counted after start-up: from the end of the first batch with
rows (so the input must hold several of the worker's batches: 4 of them by
default) to the last event processed by every query (Spark: from its query
progress; Sparkpoint: polling the controller's /status, ``--poll`` apart).
The first and the last poll see the worker's reports, which come a report
interval apart, so Sparkpoint's time is a whole number of report intervals:
the worker reports every 100 ms here (``SP_REPORT_INTERVAL``; shipped: 1 s,
which on a fast machine's 5-6 s made each round 5 s or 6 s, ±20 %). A
run still going after ``--limit`` seconds of processing is measured up to
there (marked partial). Checkpoint durations come from the controller's
/history. Prints a table and writes bench/results/throughput-<date>.md and .json
(-b, -c, ... when that day has one already).
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.measure import StatusPoll, percentile, polled_rate, spark_rate  # noqa: E402
from bench.report import overrides_text, publish_json, publish_table, unused_name  # noqa: E402
from sparkpoint.devstack import REPO, LocalStack, StackConfig, free_port  # noqa: E402
from sparkpoint.eventlog import EventLog, committed_end  # noqa: E402
from sparkpoint.producer import append_trades, trades  # noqa: E402
from tests.support import get_json, log_tails  # noqa: E402
from worker.settings import WorkerSettings  # noqa: E402

VARIANTS = ("spark", "spark-logsource", "sparkpoint", "sparkpoint-nockpt")
PARTITIONS = 4              # the producer's default
# The worker's report interval here, ms: the resolution of Sparkpoint's time
# (module docstring). More reports cost the worker CPU, never help it.
REPORT_INTERVAL_MS = "100"
JSON_FILES = 40             # the JSON copy: this many files of equal size
WRITE_CHUNK = 200_000       # events generated at a time
EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)     # of timed input (prepare)


# -- the input, once --------------------------------------------------------------------

def prepare(cache: Path, events: int, per_event_second: int = 0) -> Path:
    """``cache/<events>/log/trades`` and ``.../json/*.json``; reused when
    complete. ``per_event_second``: the trades' event times are not the wall
    clock's but ``per_event_second`` trades a second from 2026-01-01, each up
    to 2 s out of order (for windows: minutes of event time)."""
    root = cache / (f"{events}-timed{per_event_second}" if per_event_second else str(events))
    if (root / "ready").exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    log = EventLog.create(root / "log" / "trades", PARTITIONS)
    print(f"writing {events:,} events to {root} ...", flush=True)
    generator = trades(seed=1)
    skew = random.Random(1)
    for first in range(0, events, WRITE_CHUNK):
        chunk = [next(generator) for _ in range(min(WRITE_CHUNK, events - first))]
        if per_event_second:
            for event in chunk:
                second = max(0.0, event["id"] / per_event_second - skew.uniform(0, 2))
                event["time"] = (EPOCH + datetime.timedelta(seconds=second)).isoformat().replace("+00:00", "Z")
        append_trades(log, chunk)
    lines = [line for p in range(PARTITIONS) for line in log.path(p).read_bytes().splitlines(keepends=True)]
    (root / "json").mkdir()
    size = -(-len(lines) // JSON_FILES)
    for index in range(0, len(lines), size):
        (root / "json" / f"part-{index // size:04d}.json").write_bytes(b"".join(lines[index:index + size]))
    (root / "ready").write_text(str(events))
    return root


# -- one run of a variant -----------------------------------------------------------------

def run_spark(source: str, data: Path, work: Path, events: int, batch: int, limit: float,
              computation: str = "trades") -> dict:
    """bench/spark_baseline.py over ``data`` (its JSON files, or its log), computing ``computation``."""
    result = work / "progress.json"
    directory = data / "json" if source == "json" else data / "log" / "trades"
    with open(work / "spark.log", "wb") as log:
        done = subprocess.run([sys.executable, str(REPO / "bench" / "spark_baseline.py"), "--source", source,
                               "--input", str(directory), "--events", str(events), "--batch", str(batch),
                               "--work", str(work), "--result", str(result), "--timeout", str(limit),
                               "--computation", computation],
                              cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode:
        raise RuntimeError(f"spark_baseline.py failed:\n{(work / 'spark.log').read_text()[-3000:]}")
    progress = json.loads(result.read_text())["queries"]
    rate = spark_rate(progress)
    processed = min(sum(p["numInputRows"] for p in q) for q in progress.values())
    return {"rate": rate.per_second, "partial": processed < events, "batches": max(map(len, progress.values()))}


def log_read(ends: dict[str, int]) -> Callable[[dict], bool]:
    """A worker (its /status entry) has read every partition of the log to its end."""
    return lambda worker: bool(worker["offsets"]) and all(o == ends for o in worker["offsets"].values())


def worker_poll(status_url: str, token: str | None, at_end: Callable[[dict], bool]) -> StatusPoll | None:
    workers = get_json(status_url, token).get("workers", [])
    if not workers:
        return None
    worker = workers[0]
    return StatusPoll(time.monotonic(), worker["rows_processed"], at_end(worker))


def run_sparkpoint(data: Path, work: Path, env: dict[str, str], limit: float, poll_s: float,
                   at_end: Callable[[dict], bool] | None = None, pipeline: Path | None = None) -> dict:
    """A controller and one worker over ``data``'s log (or what ``pipeline``
    reads), until ``at_end(worker)`` (default: the log read to its end)."""
    config = StackConfig(root=work, workers=1, grpc_port=free_port(), http_port=free_port(),
                         env={"SP_LOG_DIR": str(data / "log"), **env})
    if pipeline is not None:
        config.pipeline = pipeline
    if at_end is None:
        log = EventLog(data / "log" / "trades")
        at_end = log_read({str(p): committed_end(log.path(p), 0) for p in range(PARTITIONS)})
    stack = LocalStack(config)
    polls: list[StatusPoll] = []
    try:
        stack.start_controller()
        stack.start_worker(0)
        deadline = time.monotonic() + 600       # start-up, first batch included
        started = False
        while time.monotonic() < deadline:
            if any(s.process.poll() is not None for s in stack.services.values()):
                raise RuntimeError(f"a service exited:\n{log_tails(stack)}")
            try:
                poll = worker_poll(config.status_url, config.api_token, at_end)
            except OSError:
                poll = None     # the controller is still starting
            if poll is not None:
                polls.append(poll)
                if poll.at_end and poll.rows > 0:
                    break
                if poll.rows > 0 and not started:
                    started, deadline = True, poll.at + limit
            time.sleep(poll_s)  # polling the controller; the deadline bounds the run
        rate = polled_rate(polls)
        status = get_json(config.status_url, config.api_token)["workers"][0]
        history = get_json(config.status_url.replace("/status", "/history"), config.api_token)
    finally:
        stack.stop_all()
    durations = [c["duration_s"] * 1000 for w in history["workers"].values() for c in w["checkpoints"]]
    return {"rate": rate.per_second, "partial": rate.partial, "checkpoint_ms": durations,
            "checkpoints": status["checkpoints_completed"], "dropped_checkpoints": status["dropped_checkpoints"],
            "batches": status["batch_id"] + 1}


# -- the table ----------------------------------------------------------------------------

def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(args: argparse.Namespace, runs: dict[str, list[dict]], overrides: dict[str, str],
          report_interval_ms: str) -> list[str]:
    rates = {v: [r["rate"] for r in rs] for v, rs in runs.items()}
    spark = median(rates.get("spark", []))
    nockpt = median(rates.get("sparkpoint-nockpt", []))
    lines = [f"# Throughput, pipelines/trades.py ({args.events:,} events, {args.rounds} rounds interleaved, "
             "1 worker, 2 cores)", "",
             f"Command: `{' '.join(sys.argv)}`", "",
             "| variant | median events/s | min | max | ratio to spark | ckpt ÷ nockpt | ckpt p50 / p99 (ms) | "
             "checkpoints / dropped | note |",
             "|---|---|---|---|---|---|---|---|---|"]
    for variant, values in rates.items():
        rs = runs[variant]
        durations = [d for r in rs for d in r.get("checkpoint_ms", [])]
        ckpt = f"{percentile(durations, 0.5):.0f} / {percentile(durations, 0.99):.0f}" if durations else ""
        counts = (f"{sum(r['checkpoints'] for r in rs)} / {sum(r['dropped_checkpoints'] for r in rs)}"
                  if "checkpoints" in rs[0] else "")
        ratio = f"{median(values) / nockpt:.2f}" if variant == "sparkpoint" and nockpt == nockpt else ""
        partial = sum(r["partial"] for r in rs)
        note = f"{partial} run(s) cut at {args.limit:.0f} s" if partial else ""
        lines.append(f"| {variant} | {median(values):,.0f} | {min(values):,.0f} | {max(values):,.0f} "
                     f"| {median(values) / spark:.2f} | {ratio} | {ckpt} | {counts} | {note} |")
    settings = overrides_text(overrides)
    lines += ["", f"Spark variants: local[2], 2 shuffle partitions, about {args.batch:,} events per batch. "
              f"Sparkpoint: the worker's shipped defaults, SP_CHECKPOINT_FREQ 1000 (nockpt: 0), reports every "
              f"{report_interval_ms} ms (the resolution of its time); "
              f"overrides: {settings}."]
    return lines


def parse_settings(pairs: list[str]) -> dict[str, str]:
    settings = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.startswith("SP_"):
            raise SystemExit(f"--set takes SP_NAME=VALUE, got {pair!r}")
        settings[name] = value
    return settings


def parse_rounds(parser: argparse.ArgumentParser, known: tuple[str, ...], *,
                 throughput: bool = True) -> tuple[argparse.Namespace, list[str]]:
    """The options of a benchmark run in interleaved rounds of ``known``
    variants, added to ``parser``, parsed; and the variants chosen.
    ``throughput``: also a throughput run's (``--limit``, ``--poll``, ``--cache``)."""
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", default=",".join(known), help="comma-separated, of " + ", ".join(known))
    parser.add_argument("--set", action="append", default=[], metavar="SP_X=V",
                        help="a worker setting for the Sparkpoint variants (repeatable)")
    if throughput:
        parser.add_argument("--limit", type=float, default=300, help="seconds of processing before a run is cut")
        parser.add_argument("--poll", type=float, default=0.1, help="seconds between /status polls")
        parser.add_argument("--cache", type=Path, default=REPO / "var" / "bench-cache",
                            help="where the input is kept")
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    unknown = set(variants) - set(known)
    if unknown:
        raise SystemExit(f"unknown variants: {', '.join(sorted(unknown))}")
    return args, variants


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=4_000_000)
    parser.add_argument("--batch", type=int, default=WorkerSettings.model_fields["max_records_per_batch"].default,
                        help="Spark variants: about this many events a batch (default: the worker's shipped cap)")
    args, variants = parse_rounds(parser, VARIANTS)
    overrides = parse_settings(args.set)
    sparkpoint_env = {"SP_REPORT_INTERVAL": REPORT_INTERVAL_MS, **overrides}
    data = prepare(args.cache, args.events)
    batch = args.batch = min(args.batch, max(1, args.events // 5))     # a small input still makes several batches
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="sp-bench-throughput-") as tmp:
        for round_ in range(args.rounds):
            for variant in variants:
                work = Path(tmp) / f"{round_}-{variant}"
                work.mkdir()
                if variant.startswith("spark-") or variant == "spark":
                    source = "json" if variant == "spark" else "log"
                    run = run_spark(source, data, work, args.events, batch, args.limit)
                else:
                    freq = "1000" if variant == "sparkpoint" else "0"
                    run = run_sparkpoint(data, work, {**sparkpoint_env, "SP_CHECKPOINT_FREQ": freq}, args.limit,
                                         args.poll)
                runs[variant].append(run)
                print(f"round {round_ + 1}: {variant}: {run['rate']:,.0f} events/s"
                      + (" (partial)" if run["partial"] else ""), flush=True)
    name = unused_name(f"throughput-{time.strftime('%Y-%m-%d')}")
    publish_table(name, table(args, runs, overrides, sparkpoint_env["SP_REPORT_INTERVAL"]))
    publish_json(name, {"events": args.events, "rounds": args.rounds, "batch": batch, "overrides": overrides,
                        "runs": runs})


if __name__ == "__main__":
    main()
