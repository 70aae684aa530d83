"""Sink benchmarks, side by side in one run (not part of the test suite).

    .venv/bin/python bench/sinks.py [--seconds 60] [--rate 200] [--events 60000]

1. End-to-end latency, event appended -> visible in the sink, p50 and p99, per
   sink mode, at SP_CHECKPOINT_FREQ 1000 and 5000. One worker runs
   pipelines/trades_postgres.py (events to PostgreSQL, transactional; events
   to files, transactional; per-symbol VWAP to PostgreSQL, upsert) while the
   producer appends ``--rate`` events/s for ``--seconds``. A sampler polls every
   sink every 50 ms and notes when each event first becomes visible (for the
   upsert: when its symbol's row counts it), and, for reference, when it is
   staged (Spark's micro-batch latency, which every sink pays). Events
   appended before the pipeline's first batch (Spark's start-up) are left out.
2. Publish throughput of each sink against the files sink: a pre-written log
   of ``--events`` events through a one-branch pass-through pipeline per sink
   (checkpoints every 1 s), events/s from the first committed batch until
   everything is published (publishing runs beside Spark's processing, so a
   sink only costs throughput where it cannot keep up).

Runs a private PostgreSQL server (tests/pgserver.py; `make postgres-server`
installs the binaries). Prints a table and writes it to bench/results/sinks.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg  # noqa: E402

from bench.measure import percentile, upsert_latencies  # noqa: E402
from bench.report import publish_table  # noqa: E402
from sparkpoint.devstack import REPO, LocalStack, StackConfig, free_port  # noqa: E402
from sparkpoint.eventlog import EventLog, committed_end  # noqa: E402
from sparkpoint.producer import write_trades  # noqa: E402
from tests.pgserver import PostgresServer  # noqa: E402
from tests.support import all_published, get_json, wait_until  # noqa: E402
from worker.publishing.targets.files import published_files  # noqa: E402

STAGED = "staged, before any sink (Spark's batch)"
MODES = (STAGED, "PostgreSQL transactional", "files transactional", "PostgreSQL upsert")

# One branch per sink, for the throughput runs; {sink} is the sink call.
PASS_THROUGH = """
from worker import api as sp
sp.run(sp.read.from_log("trades", schema="id long, sym string, price double, size long, time timestamp",
                        name="trades") | sp.write.{sink})
"""
SINKS = {
    "files": 'to_files("events", name="out")',
    "PostgreSQL transactional": 'to_postgres("events_tx", name="out")',
    "PostgreSQL upsert": 'to_postgres("events_up", key="id", version="size", name="out")',
}


def new_stack(root: Path, pipeline: Path, **env: str) -> LocalStack:
    config = StackConfig(root=root, workers=1, grpc_port=free_port(), http_port=free_port(), env=env)
    config.pipeline = pipeline
    return LocalStack(config)


def new_database(server: PostgresServer, name: str) -> str:
    with psycopg.connect(server.dsn_for("postgres"), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return server.dsn_for(name)


def first_batch(stack: LocalStack) -> None:
    wait_until(lambda: (w := get_json(stack.config.status_url, stack.config.api_token).get("workers")) and w[0]["batch_id"] >= 0,
               timeout_s=600, what="the first batch", interval_s=0.1)


def appended_at(event: dict) -> float:
    """The producer stamps each event with the wall clock when it appends it."""
    return datetime.fromisoformat(event["time"].replace("Z", "+00:00")).timestamp()


def log_events(log: EventLog) -> list[dict]:
    events = []
    for partition in range(log.partitions()):
        path = log.path(partition)
        data = path.read_bytes()[:committed_end(path, 0)]
        events += [json.loads(line) for line in data.splitlines()]
    return events


class Sampler:
    """Polls the three sinks of trades_postgres.py; remembers when each event
    (files, transactional table) or each symbol's count (upsert) first showed."""

    def __init__(self, output: Path, staging: Path, dsn: str) -> None:
        self.output = output
        self.staging = staging      # the files sink's staging: batches stay there until published
        self.dsn = dsn
        self.seen: dict[str, dict[int, float]] = {STAGED: {}, "files transactional": {}, "PostgreSQL transactional": {}}
        self.counts: dict[str, list[tuple[int, float]]] = {}  # sym -> (trades, time) whenever its count grew
        self._files: set[Path] = set()
        self._prefix = -1          # every id up to this one seen in the transactional table
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        import pyarrow.parquet as pq

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop.wait(0.05):
                now = time.time()
                for batch in self.staging.glob("run-*/b*"):
                    if batch not in self._files:
                        try:
                            ids = [i for f in batch.glob("*.parquet")
                                   for i in pq.read_table(f, columns=["id"]).column("id").to_pylist()]
                        except FileNotFoundError:
                            continue    # published and deleted meanwhile
                        self._files.add(batch)
                        for event_id in ids:
                            self.seen[STAGED].setdefault(event_id, now)
                for batches in published_files(self.output).values():
                    for path in (p for paths in batches.values() for p in paths if p not in self._files):
                        self._files.add(path)
                        for event_id in pq.read_table(path, columns=["id"]).column("id").to_pylist():
                            self.seen["files transactional"].setdefault(event_id, now)
                try:
                    # Ids are dense but a batch may publish one before a smaller one:
                    # look above the longest prefix seen whole.
                    seen = self.seen["PostgreSQL transactional"]
                    for (event_id,) in conn.execute("SELECT id FROM trades_enriched WHERE id > %s",
                                                    (self._prefix,)):
                        seen.setdefault(event_id, now)
                    while self._prefix + 1 in seen:
                        self._prefix += 1
                    for sym, trades in conn.execute("SELECT sym, trades FROM vwap"):
                        shown = self.counts.setdefault(sym, [])
                        if not shown or trades > shown[-1][0]:
                            shown.append((trades, now))
                except psycopg.errors.UndefinedTable:
                    pass    # not created yet: nothing published

    def latencies(self, events: list[dict], since: float) -> dict[str, list[float]]:
        """Seconds from each event's append to its first sighting, per mode,
        for the events (of all in the log) appended at ``since`` or later."""
        appended = {e["id"]: appended_at(e) for e in events}
        measured = {i for i, t in appended.items() if t >= since}
        result = {mode: [seen[i] - appended[i] for i in measured if i in seen] for mode, seen in self.seen.items()}
        times: dict[str, list[float]] = {}     # each symbol's append times, in id order
        for event in sorted(events, key=lambda e: e["id"]):
            times.setdefault(event["sym"], []).append(appended[event["id"]])
        result["PostgreSQL upsert"] = upsert_latencies(self.counts, times, since)
        return result


def latency_run(root: Path, server: PostgresServer, freq_ms: int, seconds: int, rate: int) -> dict[str, list[float]]:
    dsn = new_database(server, f"latency_{freq_ms}")
    stack = new_stack(root, REPO / "pipelines" / "trades_postgres.py", SP_CHECKPOINT_FREQ=str(freq_ms),
                      SP_PG_DSN=dsn, SP_PRODUCER_RATE=str(rate), SP_TRIGGER_INTERVAL="200",
                      SP_REPORT_INTERVAL="500")
    sampler = Sampler(stack.config.output_dir / "trades_enriched",
                      stack.config.checkpoint_dir(0) / "staging" / "enriched_out", dsn)
    try:
        stack.start_controller()
        stack.start_producer()
        stack.start_worker(0)
        first_batch(stack)
        warm = time.time() + 5          # the first batches still carry Spark's start-up backlog
        sampler.start()
        time.sleep(seconds + 5)
        stack.stop("producer")
        events = log_events(EventLog(stack.config.log_dir / "trades"))
        wait_until(lambda: all_published(get_json(stack.config.status_url, stack.config.api_token)), timeout_s=120,
                   what="everything published", interval_s=0.2)
        time.sleep(0.5)
        sampler.stop()
        return sampler.latencies(events, since=warm)
    finally:
        stack.stop_all()


def throughput_run(root: Path, server: PostgresServer, sink: str, events: int) -> float:
    pipeline = root / "pipeline.py"
    root.mkdir(parents=True)
    pipeline.write_text(PASS_THROUGH.format(sink=SINKS[sink]))
    dsn = new_database(server, f"throughput_{abs(hash(sink)) % 10**8}")
    stack = new_stack(root, pipeline, SP_CHECKPOINT_FREQ="1000", SP_PG_DSN=dsn, SP_MAX_RECORDS_PER_BATCH="5000",
                      SP_TRIGGER_INTERVAL="0", SP_REPORT_INTERVAL="200")
    log = EventLog.create(stack.config.log_dir / "trades", 2)
    write_trades(log, events)
    ends = {str(p): committed_end(log.path(p), 0) for p in range(2)}
    try:
        stack.start_controller()
        stack.start_worker(0)
        first_batch(stack)
        started = time.monotonic()
        wait_until(lambda: (s := get_json(stack.config.status_url, stack.config.api_token)) and all_published(s)
                   and s["workers"][0]["offsets"].get("out") == ends, timeout_s=900,
                   what="the whole log published", interval_s=0.1)
        return events / (time.monotonic() - started)
    finally:
        stack.stop_all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--events", type=int, default=60000)
    args = parser.parse_args()
    lines = [f"# Sink benchmarks (1 worker, 2 cores; latency: {args.rate} events/s for {args.seconds} s; "
             f"throughput: {args.events} events)", "",
             "| sink | checkpoint freq | latency p50 (s) | latency p99 (s) | events measured |", "|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory(prefix="sp-bench-sinks-") as tmp, PostgresServer() as server:
        for freq in (1000, 5000):
            latencies = latency_run(Path(tmp) / f"latency-{freq}", server, freq, args.seconds, args.rate)
            for mode in MODES:
                values = latencies[mode] or [float("nan")]
                line = (f"| {mode} | {freq} ms | {statistics.median(values):.2f} | {percentile(values, 0.99):.2f} "
                        f"| {len(latencies[mode])} |")
                lines.append(line)
                print(line, flush=True)
        lines += ["", "| sink | published events/s | relative to files |", "|---|---|---|"]
        rates = {}
        for sink in SINKS:
            rates[sink] = throughput_run(Path(tmp) / f"throughput-{len(rates)}", server, sink, args.events)
            print(f"{sink}: {rates[sink]:,.0f} events/s", flush=True)
        lines += [f"| {sink} | {rate:,.0f} | {rate / rates['files']:.2f} |" for sink, rate in rates.items()]
    publish_table("sinks", lines)


if __name__ == "__main__":
    main()
