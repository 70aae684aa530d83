"""End-to-end latency of Kafka in -> Kafka out, exactly once (the issue's
target: p99 <= 2.5 s at 2,000 events/s; not part of the test suite), side by
side in one run with a plain consume-transform-produce loop.

    .venv/bin/python bench/kafka_latency.py [--rate 2000] [--warmup 30] [--seconds 60] [--rounds 3] [--set SP_X=V ...]

Each run has a broker of its own (``tests/kafkaserver.py``: the tests'
broker, on 127.0.0.1, which keeps every record in memory and saves them all
each second: a fresh one per run keeps it small) with an input and an output
topic of 4 partitions. A producer thread writes trades to the input at
``--rate`` events/s, keyed by symbol, each stamped with the wall clock when
produced (``sent_at``). Round by round, one after the other:

- ``baseline``: a ``confluent-kafka`` loop in this process, no Spark: a
  ``read_committed`` consumer of the input, each value parsed and written
  again to the output keyed by symbol by a transactional producer that
  commits once a second, with the input's offsets
  (``send_offsets_to_transaction``): the same commit cadence as Sparkpoint's;
- ``sparkpoint``: a controller and one worker running
  ``from_kafka(input) | to_kafka(output, key="sym")`` at the worker's shipped
  defaults (a trigger every 1 s; a checkpoint every 1 s, whose output the
  sink publishes in one transaction when it completes); ``--set`` overrides.

An event's latency is when it became visible to a ``read_committed`` reader
of the output minus its ``sent_at``. Visible: the first answer to a
ListOffsets request (``read_committed``: the last stable offset), sent every
``SWEEP_S``, that covers the record; the records are then read with a
consumer assigned only while it reads. (This broker answers a fetch at once,
even an empty one, ignoring ``fetch.wait.max.ms``: a consumer left assigned
fetches in a busy loop, 0.4 core of its own and 0.4 of the broker's while
idle. The baseline's consumer is left assigned, as a plain loop's is.)

Measured: the events produced during ``--seconds`` after a ``--warmup`` that
starts when the run's first output is visible (Spark's first batches carry
its start-up); each must be seen exactly once. The producer runs on until
all of them are visible, then ``SETTLE_S`` more for late duplicates. Each
round also counts the pauses of over ``GAP_S`` between two appearances of
output (a commit that published nothing: Sparkpoint's checkpoint cut before
its batch was committed, the batch then published a second later). Prints
medians of the per-round figures (min-max), then each round, and writes
bench/results/kafka_latency-<date>.md and .json.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.measure import percentile  # noqa: E402
from bench.report import overrides_text, publish_json, publish_table, python_loop_s, unused_name  # noqa: E402
from bench.throughput import parse_rounds, parse_settings  # noqa: E402
from sparkpoint.devstack import LocalStack, StackConfig, free_port  # noqa: E402
from sparkpoint.producer import trades  # noqa: E402
from tests.kafkaserver import KafkaServer  # noqa: E402
from tests.support import get_json, log_tails  # noqa: E402

VARIANTS = ("baseline", "sparkpoint")
INPUT, OUTPUT = "trades", "trades_out"
PARTITIONS = 4
SCHEMA = "id long, sym string, price double, size long, sent_at double"
PIPELINE = f'''
from worker import api as sp

sp.run(sp.read.from_kafka("{INPUT}", schema="{SCHEMA}", name="trades")
       | sp.write.to_kafka("{OUTPUT}", key="sym", name="trades_out"))
'''
COMMIT_S = 1.0          # the baseline's transactions: Sparkpoint's checkpoint interval
TICK_S = 0.005          # the producer thread's step
SWEEP_S = 0.05          # how often visibility is checked: latencies are up to this late
READ_TIMEOUT_S = 30.0   # a visible range not read by then fails the run
STARTUP_S = 600.0       # the first output must be visible by then
DRAIN_S = 60.0          # after the window: until every measured event is visible
SETTLE_S = 3.0          # then this long for late duplicates (three commits)
SLICE_S = 10.0          # p99 over time: per slice of the window
GAP_S = 1.5 * COMMIT_S  # output appearing after a longer pause: a commit (a checkpoint's publish) skipped
QUANTILES = {"p50": 0.5, "p95": 0.95, "p99": 0.99, "max": 1.0}
SHARED = {"enable.auto.commit": False, "isolation.level": "read_committed"}


class Task(threading.Thread):
    """A loop on a thread of its own: ``stop`` ends it, ``check`` raises its error."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.loop()
        except BaseException as error:  # noqa: BLE001 - handed to the main thread by check()
            self.error = error

    def loop(self) -> None:
        raise NotImplementedError

    def check(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"{type(self).__name__} failed") from self.error

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=60)
        self.check()


class Feed(Task):
    """Trades into the input at a steady rate; ``sent[id]`` is when each was produced."""

    def __init__(self, bootstrap: str, rate: int) -> None:
        super().__init__()
        self.bootstrap, self.rate = bootstrap, rate
        self.sent: list[float] = []

    def loop(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "partitioner": "murmur2_random"})
        events, started = trades(seed=1), time.time()
        while not self.stopping.wait(TICK_S):
            while len(self.sent) < (time.time() - started) * self.rate:
                trade = next(events)
                del trade["time"]
                sent_at = time.time()
                producer.produce(INPUT, json.dumps({**trade, "sent_at": sent_at}).encode(), key=trade["sym"].encode(),
                                 on_delivery=self.delivered)
                self.sent.append(sent_at)
            producer.poll(0)
        if producer.flush(30):
            raise RuntimeError("the broker did not acknowledge every trade")

    def delivered(self, error, _message) -> None:
        if error is not None:
            self.error = RuntimeError(f"a trade was not produced: {error}")

    def ids_between(self, start: float, end: float) -> range:
        return range(bisect.bisect_left(self.sent, start), bisect.bisect_left(self.sent, end))


class Watcher(Task):
    """The output as a ``read_committed`` reader sees it: for each id, when it
    became visible, its latency, and how many copies of it were read."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__()
        self.bootstrap = bootstrap
        self.seen: dict[int, float] = {}
        self.latency: dict[int, float] = {}
        self.copies: Counter[int] = Counter()
        self.first: float | None = None                     # when the first output was visible
        self.read = dict.fromkeys(range(PARTITIONS), 0)    # the next offset to read, per partition

    def loop(self) -> None:
        from confluent_kafka import Consumer, IsolationLevel, TopicPartition
        from confluent_kafka.admin import AdminClient, OffsetSpec

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "bench-watcher",
                             "enable.partition.eof": True, **SHARED})
        latest = {TopicPartition(OUTPUT, p): OffsetSpec.latest() for p in range(PARTITIONS)}
        try:
            while not self.stopping.wait(SWEEP_S):
                futures = admin.list_offsets(latest, isolation_level=IsolationLevel.READ_COMMITTED)
                ends = {tp.partition: future.result().offset for tp, future in futures.items()}
                visible_at = time.time()
                behind = {p: end for p, end in ends.items() if end > self.read[p]}
                if behind:
                    self.read_to(consumer, behind, visible_at)
        finally:
            consumer.close()

    def read_to(self, consumer, ends: dict[int, int], visible_at: float) -> None:
        """Each partition of ``ends`` from where it was left to its end (records
        past it are left for the sweep that finds them visible)."""
        from confluent_kafka import KafkaError, TopicPartition

        consumer.assign([TopicPartition(OUTPUT, p, self.read[p]) for p in ends])
        deadline = time.monotonic() + READ_TIMEOUT_S
        try:
            while ends:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"offsets {ends} of {OUTPUT} were visible but not read in {READ_TIMEOUT_S} s")
                for message in consumer.consume(1000, timeout=0.01):
                    partition, error = message.partition(), message.error()
                    if partition not in ends:
                        continue
                    if error is None:
                        if message.offset() < ends[partition]:
                            self.record(json.loads(message.value()), visible_at)
                        reached = message.offset() + 1
                    elif error.code() == KafkaError._PARTITION_EOF:
                        reached = message.offset()     # past the markers before it
                    else:
                        raise RuntimeError(f"reading {OUTPUT}: {error.str()}")
                    if reached >= ends[partition]:
                        self.read[partition] = ends.pop(partition)
        finally:
            consumer.unassign()

    def record(self, event: dict, visible_at: float) -> None:
        event_id = event["id"]
        self.copies[event_id] += 1
        if event_id not in self.seen:
            self.seen[event_id] = visible_at
            self.latency[event_id] = visible_at - event["sent_at"]
            self.first = self.first or visible_at


class Relay(Task):
    """The baseline: consume, parse, produce, commit once a second with the
    input's offsets, in one transaction."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__()
        self.bootstrap = bootstrap

    def loop(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "bench-relay", **SHARED})
        consumer.assign([TopicPartition(INPUT, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        producer = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": "bench-latency",
                             "partitioner": "murmur2_random"})
        producer.init_transactions(30)
        producer.begin_transaction()
        next_commit = time.monotonic() + COMMIT_S
        try:
            while not self.stopping.is_set():
                for message in consumer.consume(1000, timeout=0.05):
                    if message.error() is None:
                        event = json.loads(message.value())
                        producer.produce(OUTPUT, json.dumps(event, separators=(",", ":")).encode(),
                                         key=event["sym"].encode())
                producer.poll(0)
                if time.monotonic() >= next_commit:
                    self.commit(consumer, producer)
                    while next_commit <= time.monotonic():
                        next_commit += COMMIT_S
            producer.abort_transaction(30)
        finally:
            consumer.close()

    @staticmethod
    def commit(consumer, producer) -> None:
        offsets = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        producer.begin_transaction()


# -- the variants: each a context that runs the pipeline and yields a check of it ----------

@contextmanager
def baseline(bootstrap: str, work: Path, overrides: dict[str, str]) -> Iterator[Callable[[], dict]]:
    relay = Relay(bootstrap)

    def check() -> dict:
        relay.check()
        return {}

    relay.start()
    try:
        yield check
    finally:
        relay.stop()


@contextmanager
def sparkpoint(bootstrap: str, work: Path, overrides: dict[str, str]) -> Iterator[Callable[[], dict]]:
    config = StackConfig(root=work / "stack", workers=1, grpc_port=free_port(), http_port=free_port(),
                         env={"SP_KAFKA_BOOTSTRAP": bootstrap, **overrides})
    config.pipeline = work / "pipeline.py"
    config.pipeline.write_text(PIPELINE)
    stack = LocalStack(config)

    def check() -> dict:
        """Fails if a service exited; the worker's checkpoint counts so far."""
        if any(s.process.poll() is not None for s in stack.services.values()):
            raise RuntimeError(f"a service exited:\n{log_tails(stack)}")
        try:
            worker = get_json(config.status_url, config.api_token)["workers"][0]
        except (OSError, KeyError, IndexError):
            return {}   # the controller, or the worker's first report, is still to come
        return {"checkpoints": worker["checkpoints_completed"], "dropped_checkpoints": worker["dropped_checkpoints"]}

    try:
        stack.start_controller()
        stack.start_worker(0)
        yield check
    finally:
        stack.stop_all()


PIPELINES = {"baseline": baseline, "sparkpoint": sparkpoint}


# -- one run ------------------------------------------------------------------------------

def cpu_seconds(pid: int) -> float:
    """CPU seconds (user and system) process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy() -> tuple[int, int]:
    """Busy and total jiffies of every core so far (``/proc/stat``)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4], sum(fields)


def wait(until: Callable[[], bool], deadline: float, check: Callable[[], dict], *tasks: Task) -> bool:
    """Until ``until()`` or the wall clock's ``deadline``, checking the pipeline
    and ``tasks`` every 0.2 s; returns ``until()``."""
    while not until() and time.time() < deadline:
        check()
        for task in tasks:
            task.check()
        time.sleep(0.2)
    return until()


def run_variant(variant: str, work: Path, args: argparse.Namespace, overrides: dict[str, str]) -> dict:
    kafka = KafkaServer().start()
    feed, watcher = Feed(kafka.bootstrap, args.rate), Watcher(kafka.bootstrap)
    try:
        kafka.create_topic(INPUT, PARTITIONS)
        kafka.create_topic(OUTPUT, PARTITIONS)
        watcher.start()
        feed.start()
        with PIPELINES[variant](kafka.bootstrap, work, overrides) as check:
            if not wait(lambda: watcher.first is not None, time.time() + STARTUP_S, check, feed, watcher):
                raise RuntimeError(f"{variant}: no output visible in {STARTUP_S:.0f} s")
            start = watcher.first + args.warmup
            end = start + args.seconds
            wait(lambda: False, start, check, feed, watcher)
            broker = kafka._process.pid     # the tests' server does not expose it
            broker_before, busy_before = cpu_seconds(broker), machine_busy()
            wait(lambda: False, end, check, feed, watcher)
            broker_after, busy_after = cpu_seconds(broker), machine_busy()
            ids = feed.ids_between(start, end)
            wait(lambda: all(i in watcher.seen for i in ids), end + DRAIN_S, check, feed, watcher)
            wait(lambda: False, time.time() + SETTLE_S, check, feed, watcher)
            status = check()
    finally:
        feed.stop()
        watcher.stop()
        kafka.stop()
    busy = (busy_after[0] - busy_before[0]) / (busy_after[1] - busy_before[1])
    return {**summarize(ids, feed, watcher, start), "broker_cores": (broker_after - broker_before) / args.seconds,
            "machine_busy": busy, "produced": len(feed.sent), **status}


def summarize(ids: range, feed: Feed, watcher: Watcher, start: float) -> dict:
    latencies = [watcher.latency[i] for i in ids if i in watcher.seen]
    slices: dict[int, list[float]] = {}
    for i in ids:
        if i in watcher.seen:
            slices.setdefault(int((feed.sent[i] - start) // SLICE_S), []).append(watcher.latency[i])
    visible = sorted({watcher.seen[i] for i in ids if i in watcher.seen})
    return {"events": len(ids), "seen": len(latencies), "missing": len(ids) - len(latencies),
            "duplicated": sum(watcher.copies[i] > 1 for i in ids),
            "gaps": sum(later - earlier > GAP_S for earlier, later in zip(visible, visible[1:])),
            **{name: percentile(latencies, q) for name, q in QUANTILES.items()},
            "p99_by_slice": [percentile(slices[k], 0.99) for k in sorted(slices)]}


# -- the table ----------------------------------------------------------------------------

def spread(values: list[float], fmt: str) -> str:
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def exactly_once(runs: list[dict]) -> str:
    missing, duplicated = sum(r["missing"] for r in runs), sum(r["duplicated"] for r in runs)
    return "yes" if not missing and not duplicated else f"no: {missing} missing, {duplicated} duplicated"


def table(args: argparse.Namespace, runs: dict[str, list[dict]], overrides: dict[str, str],
          loops: tuple[float, float]) -> list[str]:
    lines = [f"# Kafka latency: Kafka -> Kafka, exactly once ({args.rate:,} events/s, {args.seconds:.0f} s measured "
             f"after {args.warmup:.0f} s of warm-up, {args.rounds} rounds interleaved, 1 worker, 2 cores)", "",
             f"Command: `{' '.join(sys.argv)}`", "",
             "Medians of the rounds' figures (min-max), seconds from produce to visible to a `read_committed` "
             "reader:", "",
             "| variant | p50 (s) | p95 (s) | p99 (s) | max (s) | events measured per round | exactly once "
             "| broker cores | machine busy |",
             "|---|---|---|---|---|---|---|---|---|"]
    for variant, rs in runs.items():
        figures = " | ".join(spread([r[q] for r in rs], ".2f") for q in QUANTILES)
        lines.append(f"| {variant} | {figures} | {spread([r['events'] for r in rs], ',.0f')} | {exactly_once(rs)} "
                     f"| {spread([r['broker_cores'] for r in rs], '.2f')} "
                     f"| {spread([100 * r['machine_busy'] for r in rs], '.0f')} % |")
    lines += ["", f"| round | variant | p50 | p95 | p99 | max | seen / measured | p99 per {SLICE_S:.0f} s of the window "
              f"| output gaps > {GAP_S:.1f} s | checkpoints / dropped (whole run) |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for round_ in range(args.rounds):
        for variant, rs in runs.items():
            r = rs[round_]
            figures = " | ".join(f"{r[q]:.2f}" for q in QUANTILES)
            counts = f"{r['checkpoints']} / {r['dropped_checkpoints']}" if "checkpoints" in r else ""
            lines.append(f"| {round_ + 1} | {variant} | {figures} | {r['seen']:,} / {r['events']:,} "
                         f"| {' '.join(f'{p:.2f}' for p in r['p99_by_slice'])} | {r['gaps']} | {counts} |")
    settings = overrides_text(overrides)
    lines += ["", f"Broker: noida-db (tests/kafkaserver.py) on 127.0.0.1, on the same 2-core machine, a fresh one "
              f"per run; input and output topics of {PARTITIONS} partitions. Visibility checked every "
              f"{SWEEP_S * 1000:.0f} ms (latencies up to that late). Baseline: confluent-kafka in the benchmark's "
              f"process, a transaction committed every {COMMIT_S:.0f} s. Sparkpoint: controller and one worker at "
              f"the shipped defaults (trigger and checkpoint every 1 s); overrides: {settings}. "
              f"Broker cores, machine busy: during the measured window. Machine: a Python loop of 20 M additions "
              f"took {loops[0]:.2f} s before, {loops[1]:.2f} s after."]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=2000, help="events/s into the input topic")
    parser.add_argument("--warmup", type=float, default=30, help="seconds after the first output, not measured")
    parser.add_argument("--seconds", type=float, default=60, help="seconds of produced events measured")
    args, variants = parse_rounds(parser, VARIANTS, throughput=False)
    overrides = parse_settings(args.set)
    before = python_loop_s()
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="sp-bench-latency-") as tmp:
        for round_ in range(args.rounds):
            for variant in variants:
                work = Path(tmp) / f"{round_}-{variant}"
                work.mkdir()
                run = run_variant(variant, work, args, overrides)
                runs[variant].append(run)
                print(f"round {round_ + 1}: {variant}: p50 {run['p50']:.2f} s, p99 {run['p99']:.2f} s, "
                      f"max {run['max']:.2f} s, {run['seen']:,} / {run['events']:,} seen", flush=True)
    loops = (before, python_loop_s())
    name = unused_name(f"kafka_latency-{time.strftime('%Y-%m-%d')}")
    publish_table(name, table(args, runs, overrides, loops))
    publish_json(name, {"rate": args.rate, "warmup": args.warmup, "seconds": args.seconds, "rounds": args.rounds,
                        "overrides": overrides, "runs": runs, "python_loop_s": loops})


if __name__ == "__main__":
    main()
