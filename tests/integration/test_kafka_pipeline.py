"""The Kafka source in real Spark queries and a real worker, against a real
broker (``tests/kafkaserver.py``): every record once across a broker
restart and the query's own restart; a malformed value named; a worker
killed mid-run resumes from its checkpoint's Kafka offsets, every trade
published exactly once, to files and to a Kafka topic."""

from __future__ import annotations

import json
import random
import signal
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from pyspark.errors import StreamingQueryException

from sparkpoint.eventlog import partition_for_key
from sparkpoint.producer import trades
from tests.kafkaserver import read_committed
from tests.support import all_published, expected_vwap, get_json, metric_samples, wait_until, worker_status
from worker.publishing.targets.files import read_published
from worker.sources.kafka import read_kafka

pytestmark = pytest.mark.integration

SCHEMA = "id long, sym string, price double, size long, time timestamp"


def produce(bootstrap: str, topic: str, events: list[dict], partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for event in events:
        producer.produce(topic, json.dumps(event).encode(), key=event["sym"].encode(),
                         partition=partition_for_key(event["sym"], partitions))
    assert producer.flush(30) == 0, "the broker did not acknowledge every record"


def group_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return [tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 10)]
    finally:
        consumer.close()


def events(first: int, count: int) -> list[dict]:
    generator = trades(seed=3, first_id=first)
    return [next(generator) for _ in range(count)]


def start(spark, kafka, topic: str, root: Path):
    df = read_kafka(spark, [topic], SCHEMA, config={"bootstrap.servers": kafka.bootstrap},
                    max_records_per_batch=100, initial_offsets=root / "initial-offsets.json")
    return (df.writeStream.format("parquet").option("path", str(root / "out"))
            .option("checkpointLocation", str(root / "checkpoint")).trigger(processingTime="200 milliseconds").start())


def ids_written(spark, root: Path) -> list[int]:
    return [row.id for row in spark.read.parquet(str(root / "out")).select("id").collect()]


def test_a_query_reads_every_record_once_across_a_broker_restart_and_its_own_restart(spark, kafka, tmp_path):
    topic = "pipeline-restarts"
    kafka.create_topic(topic, 3)
    produce(kafka.bootstrap, topic, events(0, 300), 3)
    query = start(spark, kafka, topic, tmp_path)
    query.processAllAvailable()
    assert sorted(ids_written(spark, tmp_path)) == list(range(300))
    assert all(p["numInputRows"] <= 100 for p in query.recentProgress), "a batch went over the cap"

    kafka.kill(signal.SIGTERM)
    # Triggers with the broker gone plan no batch and fail nothing.
    query.processAllAvailable()
    assert query.isActive and query.exception() is None
    kafka.start()
    produce(kafka.bootstrap, topic, events(300, 300), 3)
    query.processAllAvailable()
    query.stop()

    produce(kafka.bootstrap, topic, events(600, 100), 3)
    restarted = start(spark, kafka, topic, tmp_path)
    try:
        restarted.processAllAvailable()
    finally:
        restarted.stop()
    ids = ids_written(spark, tmp_path)
    assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} records read twice"
    assert sorted(ids) == list(range(700))


def test_a_value_that_is_not_json_fails_the_query_naming_its_offset(spark, kafka, tmp_path):
    topic = "pipeline-malformed"
    kafka.create_topic(topic, 1)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for value in (b'{"id": 1}', b'{"id": 2}', b"id=3"):
        producer.produce(topic, value, partition=0)
    producer.flush(10)
    query = start(spark, kafka, topic, tmp_path)
    with pytest.raises(StreamingQueryException, match=f"topic '{topic}' partition 0 offset 2: the value is not JSON"):
        query.processAllAvailable()


PIPELINE = '''
from pyspark.sql import functions as F
from worker import api as sp

trades = sp.read.from_kafka("{topic}", schema="id long, sym string, price double, size long, time timestamp",
                            name="trades")
enriched = trades | sp.map(lambda df: df.withColumn("notional", F.col("price") * F.col("size")), name="enrich")
sp.run(
    enriched | sp.write.to_files("trades_enriched", name="enriched_out"),
    enriched | sp.write.to_kafka("{topic}-out", key="sym", name="enriched_kafka"),
    trades | sp.aggregate("sym", {"notional": "sum(price * size)", "volume": "sum(size)", "trades": "count(1)"},
                          name="vwap_state")
    | sp.write.to_files("vwap", name="vwap_out"),
)
'''


def pipeline_stack(make_stack, kafka, tmp_path: Path, topic: str, sent: list[dict], **env: str):
    """One worker running ``PIPELINE`` on ``topic`` (4 partitions; its output
    topic ``<topic>-out``, 2), started once ``sent`` is produced."""
    kafka.create_topic(topic, 4)
    kafka.create_topic(f"{topic}-out", 2)
    pipeline = tmp_path / "kafka_pipeline.py"
    pipeline.write_text(PIPELINE.replace("{topic}", topic))
    stack = make_stack(workers=1, pipeline=pipeline, SP_KAFKA_BOOTSTRAP=kafka.bootstrap, SP_TRIGGER_INTERVAL="200",
                       SP_REPORT_INTERVAL="300", **env)
    produce(kafka.bootstrap, topic, sent, 4)
    stack.start_controller()
    stack.start_worker(0)
    return stack


def test_a_worker_killed_mid_run_resumes_from_its_checkpoints_kafka_offsets_exactly_once(make_stack, kafka, tmp_path):
    seed = random.randrange(1 << 30)
    print(f"kill seed: {seed}")
    topic = "pipeline-killed"
    sent = events(0, 3000)
    stack = pipeline_stack(make_stack, kafka, tmp_path, topic, sent, SP_MAX_RECORDS_PER_BATCH="300")
    output = stack.config.output_dir / "trades_enriched"
    published = random.Random(seed).randrange(300, 2400)
    wait_until(lambda: output.exists() and len(read_published(output)) >= published, timeout_s=240,
               what=f"{published} trades published before the kill")
    running = worker_status(stack)
    print(f"killing worker-0 at batch {running['batch_id']}")
    stack.kill("worker-0")
    # /status: each partition's consumer lag is its end (everything was produced before the start) past
    # the slowest query's offset, among the queries that planned a batch.
    first_ends = [sum(partition_for_key(e["sym"], 4) == p for e in sent) for p in range(4)]
    for p, end in enumerate(first_ends):
        key = f"{topic}:{p}"
        planned = [q for q in running["queries"] if key in q["latest_offsets"]]
        assert planned and all(q["latest_offsets"][key] == end for q in planned)
        assert running["kafka_lag"][key] == end - min(q["offsets"][key] for q in planned)

    more = events(3000, 1000)
    produce(kafka.bootstrap, topic, more, 4)
    stack.start_worker(0)
    vwap_out = stack.config.output_dir / "vwap"
    wait_until(lambda: len(read_published(output)) >= 4000 and vwap_out.exists() and sum(
        row["trades"] for row in read_published(vwap_out, latest_batch_only=True).to_pylist()) >= 4000,
        timeout_s=240, what="every trade published by both queries")
    wait_until(lambda: all_published(get_json(stack.config.status_url, stack.config.api_token)), timeout_s=60,
               what="every staged batch to be published")
    ids = [row["id"] for row in read_published(output).to_pylist()]
    assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} trades published twice"
    assert set(ids) == {event["id"] for event in sent + more}
    records = read_committed(kafka.bootstrap, f"{topic}-out", 2)
    assert sorted(value["id"] for _, _, value in records) == sorted(ids), "the Kafka sink's topic differs from the files"
    # For Kafka's lag tools: each query's group holds the checkpointed offsets, here the partitions' ends.
    ends = [sum(partition_for_key(e["sym"], 4) == p for e in sent + more) for p in range(4)]
    for query in ("enrich", "vwap_out"):
        wait_until(lambda: group_offsets(kafka.bootstrap, f"sparkpoint.{query}", topic, 4) == ends, timeout_s=30,
                   what=f"the group sparkpoint.{query} at the partitions' ends {ends}")
    assert all(key == value["sym"].encode() and value["notional"] == value["price"] * value["size"]
               for _, key, value in records)
    # Read to the ends: each query's offsets there, no consumer lag left in /status or /metrics.
    keys = {f"{topic}:{p}": end for p, end in enumerate(ends)}
    wait_until(lambda: all(q["offsets"] == keys for q in worker_status(stack)["queries"]), timeout_s=30,
               what="both queries' offsets reported at the partitions' ends")
    assert worker_status(stack)["kafka_lag"] == dict.fromkeys(keys, 0)
    lag = {(labels["query"], labels["topic"], labels["partition"]): value
           for labels, value in metric_samples(stack, "sparkpoint_query_kafka_lag_records")}
    assert lag == {(query, topic, str(p)): 0 for query in ("enrich", "vwap_out") for p in range(4)}
    vwap = read_published(vwap_out, latest_batch_only=True).to_pylist()
    assert {row["sym"]: (row["trades"], row["volume"]) for row in vwap} == \
        {sym: (want["trades"], want["volume"]) for sym, want in expected_vwap(sent + more).items()}


def test_a_broker_restarted_mid_run_delays_the_source_and_the_sink_and_loses_nothing(make_stack, kafka, tmp_path):
    topic = "pipeline-broker-restart"
    sent = events(0, 1000)
    stack = pipeline_stack(make_stack, kafka, tmp_path, topic, sent)
    output = stack.config.output_dir / "trades_enriched"
    wait_until(lambda: output.exists() and len(read_published(output)) >= 1000, timeout_s=240,
               what="the first trades published")
    kafka.kill(signal.SIGTERM)
    more = events(1000, 1000)
    kafka.start()
    produce(kafka.bootstrap, topic, more, 4)
    wait_until(lambda: len(read_published(output)) >= 2000, timeout_s=240, what="every trade published")
    wait_until(lambda: all_published(get_json(stack.config.status_url, stack.config.api_token)), timeout_s=60,
               what="every staged batch to be published")
    records = read_committed(kafka.bootstrap, f"{topic}-out", 2)
    ids = sorted(value["id"] for _, _, value in records)
    assert ids == sorted(e["id"] for e in sent + more), \
        f"{len(ids) - len(set(ids))} twice, {2000 - len(set(ids))} missing in the Kafka sink's topic"


LATEST_PIPELINE = '''
from worker import api as sp

sp.run(sp.read.from_kafka("{topic}", schema="id long, sym string", name="trades", starting_offsets="latest")
       | sp.write.to_files("trades_out", name="trades_out"))
'''


def test_latest_is_resolved_once_so_a_worker_restarted_before_any_checkpoint_starts_where_the_first_did(
        make_stack, kafka, tmp_path):
    topic = "pipeline-latest"
    kafka.create_topic(topic, 2)
    pipeline = tmp_path / "latest_pipeline.py"
    pipeline.write_text(LATEST_PIPELINE.replace("{topic}", topic))
    # Checkpoints off: files are published as batches come, and a restart starts the query afresh.
    stack = make_stack(workers=1, pipeline=pipeline, SP_KAFKA_BOOTSTRAP=kafka.bootstrap, SP_CHECKPOINT_FREQ="0",
                       SP_TRIGGER_INTERVAL="200", SP_REPORT_INTERVAL="300")
    output = stack.config.output_dir / "trades_out"

    def published() -> list[int]:
        return [row["id"] for row in read_published(output).to_pylist()] if output.exists() else []

    before = events(0, 100)
    produce(kafka.bootstrap, topic, before, 2)                   # before the start: not read
    stack.start_controller()
    stack.start_worker(0)
    records = stack.config.checkpoint_dir(0) / "sources" / "trades_out"
    recorded = wait_until(lambda: next(records.glob("kafka-initial-offsets-*.json"), None), timeout_s=240,
                          what="the query's starting offsets resolved and recorded on the checkpoint volume")
    ends = [sum(partition_for_key(e["sym"], 2) == p for e in before) for p in (0, 1)]
    assert json.loads(recorded.read_text()) == {topic: {"0": ends[0], "1": ends[1]}}
    produce(kafka.bootstrap, topic, events(100, 100), 2)
    wait_until(lambda: set(range(100, 200)) <= set(published()), timeout_s=120, what="the first run's trades")
    stack.kill("worker-0")

    produce(kafka.bootstrap, topic, events(200, 100), 2)        # while the worker is down
    stack.start_worker(0)
    # A restart that resolved `latest` again would start after them, and never read them.
    wait_until(lambda: set(range(200, 300)) <= set(published()), timeout_s=120,
               what="the trades produced while the worker was down")
    assert min(published()) == 100, "a trade from before the pipeline's first start was read"


def test_a_worker_waits_for_a_missing_topic_says_why_in_status_and_metrics_then_reads_it(
        make_stack, kafka, tmp_path):
    topic = "pipeline-missing"
    pipeline = tmp_path / "missing_pipeline.py"
    pipeline.write_text(LATEST_PIPELINE.replace("{topic}", topic).replace("latest", "earliest"))
    stack = make_stack(workers=1, pipeline=pipeline, SP_KAFKA_BOOTSTRAP=kafka.bootstrap, SP_CHECKPOINT_FREQ="0",
                       SP_TRIGGER_INTERVAL="200", SP_REPORT_INTERVAL="300")
    output = stack.config.output_dir / "trades_out"
    stack.start_controller()
    stack.start_worker(0)

    def waiting() -> tuple[str, float]:
        [(_, flag)] = metric_samples(stack, "sparkpoint_worker_waiting_for_sources")
        return worker_status(stack)["waiting_for"], flag

    wait_until(lambda: worker_status(stack) and waiting() == (f"Kafka topic '{topic}' does not exist", 1),
               timeout_s=120, what="the worker to report that it waits for the topic")
    kafka.create_topic(topic, 2)
    produce(kafka.bootstrap, topic, events(0, 50), 2)
    wait_until(lambda: output.exists() and sorted(r["id"] for r in read_published(output).to_pylist()) ==
               list(range(50)), timeout_s=180, what="the topic's trades published")
    assert waiting() == ("", 0)


UPDATES_PIPELINE = '''
from worker import api as sp

sp.run(sp.read.from_kafka("{topic}", schema="id long, sym string, size long", name="trades")
       | sp.aggregate("sym", {"trades": "count(1)", "volume": "sum(size)"}, emit="updates", name="volume_state")
       | sp.write.to_kafka("{topic}-out", key="sym", name="volume_out"))
'''


def test_an_aggregate_emitting_updates_writes_only_the_keys_a_batch_changed(make_stack, kafka, tmp_path):
    topic = "pipeline-updates"
    kafka.create_topic(topic, 2)
    kafka.create_topic(f"{topic}-out", 1)
    pipeline = tmp_path / "updates_pipeline.py"
    pipeline.write_text(UPDATES_PIPELINE.replace("{topic}", topic))
    stack = make_stack(workers=1, pipeline=pipeline, SP_KAFKA_BOOTSTRAP=kafka.bootstrap, SP_TRIGGER_INTERVAL="200",
                       SP_REPORT_INTERVAL="300")

    def changelog() -> list[dict]:
        return [value for _, _, value in read_committed(kafka.bootstrap, f"{topic}-out", 1)]

    def latest() -> dict[str, tuple[int, int]]:
        return {value["sym"]: (value["trades"], value["volume"]) for value in changelog()}

    def expected(trades: list[dict]) -> dict[str, tuple[int, int]]:
        return {sym: (sum(t["sym"] == sym for t in trades), sum(t["size"] for t in trades if t["sym"] == sym))
                for sym in {t["sym"] for t in trades}}

    sent = events(0, 400)
    produce(kafka.bootstrap, topic, sent, 2)
    stack.start_controller()
    stack.start_worker(0)
    wait_until(lambda: latest() == expected(sent), timeout_s=240, what="every symbol's aggregates published")
    before = len(changelog())
    assert before >= len(expected(sent))
    one = events(400, 1)
    produce(kafka.bootstrap, topic, one, 2)
    wait_until(lambda: latest() == expected(sent + one), timeout_s=120, what="the last trade's symbol updated")
    # Only the symbol the last batch touched (the whole table would be every symbol again).
    assert changelog()[before:] == [{"sym": one[0]["sym"], "trades": expected(sent + one)[one[0]["sym"]][0],
                                     "volume": expected(sent + one)[one[0]["sym"]][1]}]
