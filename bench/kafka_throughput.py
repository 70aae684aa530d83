"""Throughput of a Kafka pipeline (issue 38's target; not part of the test
suite): Kafka -> enrich -> files, one worker at the shipped defaults, side by
side in one run with a plain Kafka consumer and with the same pipeline on
the event log.

    .venv/bin/python bench/kafka_throughput.py [--events 2000000] [--rounds 3] [--set SP_X=V ...]

The input, ``--events`` trades in the producer's format, is the event log
``bench/throughput.py`` writes into ``--cache`` (4 partitions), and the same
records produced once into a topic of 4 partitions (partition for
partition) on a broker started for the run (``tests/kafkaserver.py``: the
tests' broker, on 127.0.0.1). Then, round by round:

- ``consumer``: a plain ``confluent-kafka`` consumer in this process, every
  partition assigned from its start, values parsed by pyarrow into Arrow
  tables of the pipeline's schema (``CHUNK`` records at a time), no Spark:
  the near limit of reading Kafka from Python. Timed from its first record
  to the last one parsed.
- ``sparkpoint-kafka``: a controller and one worker running
  ``sp.read.from_kafka(...) | sp.map(enrich) | sp.write.to_files(...)``;
- ``sparkpoint-log``: the same pipeline reading the event log.

The Sparkpoint variants run at the worker's shipped defaults (checkpoints
every 1 s; the batch cap too, though the input must hold several batches,
see ``--events``), reporting every 100 ms, and are timed as ``bench/throughput.py``
times them: from the first report with rows to the report that counts every
event. Prints a table and writes bench/results/kafka_throughput-<date>.md
and .json.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa  # noqa: E402
import pyarrow.json as pa_json  # noqa: E402

from bench.report import overrides_text, publish_json, publish_table, python_loop_s, unused_name  # noqa: E402
from bench.throughput import (  # noqa: E402
    PARTITIONS,
    REPORT_INTERVAL_MS,
    parse_rounds,
    parse_settings,
    prepare,
    run_sparkpoint,
)
from sparkpoint.devstack import REPO  # noqa: E402
from sparkpoint.eventlog import EventLog  # noqa: E402
from tests.kafkaserver import CONSUMER_CONFIG, KafkaServer  # noqa: E402

VARIANTS = ("consumer", "sparkpoint-kafka", "sparkpoint-log")
TOPIC = "trades"
CHUNK = 20_000
SCHEMA = "id long, sym string, price double, size long, time timestamp"
ARROW_SCHEMA = pa.schema([("id", pa.int64()), ("sym", pa.string()), ("price", pa.float64()), ("size", pa.int64()),
                          ("time", pa.timestamp("us", tz="UTC"))])
PIPELINE = '''
from trading import enrich

from worker import api as sp

trades = sp.read.{read}
sp.run(trades | sp.map(enrich, name="enrich") | sp.write.to_files("trades_enriched", name="enriched_out"))
'''
READS = {"sparkpoint-kafka": f'from_kafka("{TOPIC}", schema="{SCHEMA}", name="trades")',
         "sparkpoint-log": f'from_log("trades", schema="{SCHEMA}", name="trades")'}


def produce(data: Path, bootstrap: str) -> int:
    """The log's records into the topic, partition for partition; returns how many."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                         "queue.buffering.max.messages": 1_000_000})
    log, count = EventLog(data / "log" / "trades"), 0
    for partition in range(PARTITIONS):
        for line in log.path(partition).read_bytes().splitlines():
            while True:
                try:
                    producer.produce(TOPIC, line, partition=partition)
                    break
                except BufferError:
                    producer.poll(0.1)
            count += 1
    if producer.flush(120):
        raise RuntimeError("the broker did not acknowledge every record")
    return count


def run_consumer(bootstrap: str, events: int) -> dict:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                         "isolation.level": "read_committed", **CONSUMER_CONFIG})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    options = pa_json.ParseOptions(explicit_schema=ARROW_SCHEMA, unexpected_field_behavior="ignore")
    rows, values, first = 0, [], None
    try:
        while rows < events:
            for message in consumer.consume(CHUNK, timeout=1.0):
                if message.error() is None:
                    first = first or time.monotonic()
                    values.append(message.value())
            if len(values) >= CHUNK or (values and rows + len(values) >= events):
                rows += pa_json.read_json(io.BytesIO(b"\n".join(values)), parse_options=options).num_rows
                values = []
    finally:
        consumer.close()
    return {"rate": rows / (time.monotonic() - first), "partial": False}


def run_variant(variant: str, data: Path, work: Path, kafka: KafkaServer, events: int, env: dict[str, str],
                limit: float, poll_s: float) -> dict:
    if variant == "consumer":
        return run_consumer(kafka.bootstrap, events)
    pipeline = work / "pipeline.py"
    pipeline.write_text(PIPELINE.format(read=READS[variant]))
    (work / "trading.py").write_text((REPO / "pipelines" / "trading.py").read_text())
    env = {**env, "SP_KAFKA_BOOTSTRAP": kafka.bootstrap, "SP_KAFKA_CONFIG": json.dumps(CONSUMER_CONFIG)}
    return run_sparkpoint(data, work / "stack", env, limit, poll_s,
                          at_end=lambda worker: worker["rows_processed"] >= events, pipeline=pipeline)


def table(args: argparse.Namespace, runs: dict[str, list[dict]], overrides: dict[str, str],
          loops: tuple[float, float]) -> list[str]:
    rates = {v: [r["rate"] for r in rs] for v, rs in runs.items()}
    consumer = statistics.median(rates["consumer"]) if rates.get("consumer") else float("nan")
    lines = [f"# Kafka throughput: Kafka -> enrich -> files ({args.events:,} events, {args.rounds} rounds "
             "interleaved, 1 worker, 2 cores)", "",
             f"Command: `{' '.join(sys.argv)}`", "",
             "| variant | median events/s | min | max | ratio to consumer |", "|---|---|---|---|---|"]
    for variant, values in rates.items():
        lines.append(f"| {variant} | {statistics.median(values):,.0f} | {min(values):,.0f} | {max(values):,.0f} "
                     f"| {statistics.median(values) / consumer:.2f} |")
    settings = overrides_text(overrides)
    lines += ["", f"Broker: noida-db (tests/kafkaserver.py) on 127.0.0.1, topic of {PARTITIONS} partitions; "
              f"consumers with {CONSUMER_CONFIG} (the broker's fetch answers ignore fetch.max.bytes). "
              f"Sparkpoint: the worker's shipped defaults, reports every {REPORT_INTERVAL_MS} ms; overrides: "
              f"{settings}. Machine: a Python loop of 20 M additions took {loops[0]:.2f} s before, "
              f"{loops[1]:.2f} s after."]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=2_000_000,
                        help="the test broker keeps every record in one JSON file, saved each second: a few "
                             "million make it stall producers (with the shipped cap, pass "
                             "--set SP_MAX_RECORDS_PER_BATCH=500000 for four batches)")
    args, variants = parse_rounds(parser, VARIANTS)
    overrides = parse_settings(args.set)
    env = {"SP_REPORT_INTERVAL": REPORT_INTERVAL_MS, **overrides}
    data = prepare(args.cache, args.events)
    before = python_loop_s()
    kafka = KafkaServer().start()
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    try:
        kafka.create_topic(TOPIC, PARTITIONS)
        print(f"producing {args.events:,} records ...", flush=True)
        produce(data, kafka.bootstrap)
        with tempfile.TemporaryDirectory(prefix="sp-bench-kafka-") as tmp:
            for round_ in range(args.rounds):
                for variant in variants:
                    work = Path(tmp) / f"{round_}-{variant}"
                    work.mkdir()
                    run = run_variant(variant, data, work, kafka, args.events, env, args.limit, args.poll)
                    runs[variant].append(run)
                    print(f"round {round_ + 1}: {variant}: {run['rate']:,.0f} events/s"
                          + (" (partial)" if run["partial"] else ""), flush=True)
    finally:
        kafka.stop()
    loops = (before, python_loop_s())
    name = unused_name(f"kafka_throughput-{time.strftime('%Y-%m-%d')}")
    publish_table(name, table(args, runs, overrides, loops))
    publish_json(name, {"events": args.events, "rounds": args.rounds, "overrides": overrides, "runs": runs,
                        "python_loop_s": loops})


if __name__ == "__main__":
    main()
