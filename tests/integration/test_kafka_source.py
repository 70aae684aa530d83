"""The Kafka source's planning and reading against a real broker
(``tests/kafkaserver.py``), called as Spark calls them: where a query
starts, resolved once and recorded; data loss named or, opted out, gone
past; new partitions; two workers' shares; a missing topic; transactions.
The source inside real Spark queries and a real worker:
``test_kafka_pipeline.py``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
from pyspark.sql.types import LongType, StringType, StructField, StructType

from worker.sources.kafka import fetch
from worker.sources.kafka import losses as kafka_losses
from worker.sources.kafka.broker import Broker, BrokerUnavailable, client_config
from worker.sources.kafka.datasource import KafkaDataLossError, KafkaOptions, KafkaStreamReader

pytestmark = pytest.mark.integration

SCHEMA = StructType([StructField("id", LongType()), StructField("sym", StringType())])


@pytest.fixture(scope="module", autouse=True)
def consumers_closed() -> Iterator[None]:
    """The consumers this module's reads leave in this process (as Spark's
    Python workers keep theirs), closed before the session's broker stops."""
    yield
    for consumer in fetch._consumers.values():
        consumer.close()
    fetch._consumers.clear()


def reader(kafka, topic: str, tmp_path: Path | None = None, **options: str) -> KafkaStreamReader:
    given = {"topics": json.dumps([topic]), "config": json.dumps({"bootstrap.servers": kafka.bootstrap}), **options}
    if tmp_path is not None:
        given["initialOffsetsPath"] = str(tmp_path / "sources" / "0" / "kafka-initial-offsets.json")
    return KafkaStreamReader(KafkaOptions.parse(given), SCHEMA)


def produce(kafka, topic: str, ids: range, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 5})
    for i in ids:
        producer.produce(topic, json.dumps({"id": i, "sym": f"S{i % 3}"}).encode(), partition=i % partitions)
    assert producer.flush(10) == 0


def read_all(source: KafkaStreamReader, start: dict, end: dict) -> list[int]:
    return [i for part in source.partitions(start, end) for batch in source.read(part)
            for i in batch.column("id").to_pylist()]


def test_latest_is_resolved_once_and_recorded_so_a_restart_starts_where_the_first_run_did(kafka, tmp_path):
    topic = "src-latest"
    kafka.create_topic(topic, 2)
    produce(kafka, topic, range(10), 2)
    first = reader(kafka, topic, tmp_path, startingOffsets="latest").initialOffset()
    assert first == {topic: {"0": 5, "1": 5}}
    produce(kafka, topic, range(10, 20), 2)
    # A restart before the first batch committed: the recorded start, not today's latest.
    again = reader(kafka, topic, tmp_path, startingOffsets="latest")
    assert again.initialOffset() == first
    end = again.latestOffset(first, ReadAllAvailable())
    assert sorted(read_all(again, first, end)) == list(range(10, 20))


def test_explicit_starting_offsets_name_some_partitions_the_rest_start_at_their_earliest(kafka):
    topic = "src-explicit"
    kafka.create_topic(topic, 2)
    produce(kafka, topic, range(10), 2)
    source = reader(kafka, topic, startingOffsets=json.dumps({topic: {"1": 3}}))
    start = source.initialOffset()
    assert start == {topic: {"0": 0, "1": 3}}
    # Partition 0 from its start (0, 2, 4, 6, 8), partition 1 from offset 3 (7, 9).
    assert sorted(read_all(source, start, source.latestOffset(start, ReadAllAvailable()))) == [0, 2, 4, 6, 7, 8, 9]


def test_the_cap_spreads_over_partitions_and_batches_read_every_record_once(kafka):
    topic = "src-cap"
    kafka.create_topic(topic, 3)
    produce(kafka, topic, range(100), 3)
    source = reader(kafka, topic, maxRecordsPerBatch="30")
    assert source.getDefaultReadLimit() == ReadMaxRows(30)
    start, seen = source.initialOffset(), []
    while (end := source.latestOffset(start, ReadMaxRows(30))) != start:
        batch = read_all(source, start, end)
        assert 0 < len(batch) <= 30
        assert {i % 3 for i in batch} == {0, 1, 2} or len(seen) + len(batch) > 90, "a partition starved"
        seen += batch
        start = end
    assert sorted(seen) == list(range(100))


def test_records_removed_before_they_were_read_fail_the_query_naming_them_or_are_gone_past(kafka, tmp_path):
    topic = "src-retention"
    kafka.create_topic(topic, 1)
    produce(kafka, topic, range(10), 1)
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    next(iter(admin.delete_records([TopicPartition(topic, 0, 4)]).values())).result(10)
    start = {topic: {"0": 2}}
    recorded = kafka_losses.losses_file(tmp_path)
    with pytest.raises(KafkaDataLossError, match=rf"topic '{topic}' partition 0: offsets 2 to 3 were removed"):
        reader(kafka, topic, dataLossesPath=str(recorded)).latestOffset(start, ReadAllAvailable())
    assert kafka_losses.count(recorded) == 0        # failed, not gone past
    lenient = reader(kafka, topic, failOnDataLoss="false", dataLossesPath=str(recorded))
    end = lenient.latestOffset(start, ReadAllAvailable())
    assert end == {topic: {"0": 10}}
    assert read_all(lenient, start, end) == list(range(4, 10))
    # Gone past, it counts (for /metrics) once, even planned again (a restarted query).
    assert kafka_losses.count(recorded) == 1
    assert lenient.latestOffset(start, ReadAllAvailable()) == end
    assert kafka_losses.count(recorded) == 1


def test_a_recreated_topic_is_data_loss(kafka):
    topic = "src-recreated"
    kafka.create_topic(topic, 1)
    produce(kafka, topic, range(3), 1)
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    next(iter(admin.delete_topics([topic]).values())).result(10)
    kafka.create_topic(topic, 1)
    with pytest.raises(KafkaDataLossError, match=rf"topic '{topic}' partition 0 went backwards: the next offset to "
                                                 "read was 40, the partition now ends at 0"):
        reader(kafka, topic).latestOffset({topic: {"0": 40}}, ReadAllAvailable())


def test_a_partition_added_to_the_topic_is_read_from_its_start(kafka):
    topic = "src-grown"
    kafka.create_topic(topic, 1)
    produce(kafka, topic, range(4), 1)
    source = reader(kafka, topic)
    start = source.initialOffset()
    end = source.latestOffset(start, ReadAllAvailable())
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    next(iter(admin.create_partitions([NewPartitions(topic, 2)]).values())).result(10)
    produce(kafka, topic, range(4, 10), 2)
    # Retention already took the new partition's first record: it starts at its earliest, no loss.
    fresh = AdminClient({"bootstrap.servers": kafka.bootstrap})     # its metadata has the new partition
    next(iter(fresh.delete_records([TopicPartition(topic, 1, 1)]).values())).result(10)
    later = source.latestOffset(end, ReadAllAvailable())
    assert later == {topic: {"0": 7, "1": 3}}
    assert sorted(read_all(source, end, later)) == [4, 6, 7, 8, 9]


def test_two_workers_split_the_partitions_p_mod_n(kafka):
    topic = "src-shares"
    kafka.create_topic(topic, 5)
    produce(kafka, topic, range(50), 5)
    shares = []
    for index in (0, 1):
        source = reader(kafka, topic, workerIndex=str(index), workerCount="2")
        start = source.initialOffset()
        assert set(start[topic]) == {str(p) for p in range(5) if p % 2 == index}
        shares.append(read_all(source, start, source.latestOffset(start, ReadAllAvailable())))
    assert {i % 5 for i in shares[0]} == {0, 2, 4} and {i % 5 for i in shares[1]} == {1, 3}
    assert sorted(shares[0] + shares[1]) == list(range(50))


def test_a_missing_topic_makes_no_batch_is_named_and_is_not_created(kafka):
    topic = "src-missing"
    source = reader(kafka, topic)
    assert source.latestOffset({topic: {"0": 0}}, ReadAllAvailable()) == {topic: {"0": 0}}
    broker = Broker(client_config({"bootstrap.servers": kafka.bootstrap}, {}))
    with pytest.raises(BrokerUnavailable, match=f"Kafka topic '{topic}' does not exist"):
        broker.partitions([topic])
    assert topic not in AdminClient({"bootstrap.servers": kafka.bootstrap}).list_topics(timeout=5).topics


def test_batches_end_at_the_last_stable_offset_and_skip_aborted_records(kafka):
    topic = "src-transactions"
    kafka.create_topic(topic, 1)
    # The aborted transaction is another producer's: see the broker's known fault in test_kafka_broker.py.
    committer, aborter = (Producer({"bootstrap.servers": kafka.bootstrap, "transactional.id": f"src-tx-{n}"})
                          for n in ("commit", "abort"))
    def transaction(producer: Producer, ids: range) -> None:
        producer.begin_transaction()
        for i in ids:
            producer.produce(topic, json.dumps({"id": i}).encode(), partition=0)
        producer.flush(10)  # on the broker before the transaction ends (an abort purges what was not sent)

    committer.init_transactions(10)
    aborter.init_transactions(10)
    transaction(committer, range(0, 3))
    committer.commit_transaction(10)
    transaction(aborter, range(100, 103))
    aborter.abort_transaction(10)
    transaction(committer, range(3, 5))
    committer.commit_transaction(10)
    transaction(committer, range(200, 201))   # left open
    source = reader(kafka, topic)
    start = source.initialOffset()
    end = source.latestOffset(start, ReadAllAvailable())
    # Offsets 0-2 committed, marker 3; 4-6 aborted, marker 7; 8-9 committed, marker 10; 11 in an open
    # transaction: the batch ends at the last stable offset, before it.
    assert end == {topic: {"0": 11}}
    assert read_all(source, start, end) == [0, 1, 2, 3, 4]
    committer.commit_transaction(10)
    later = source.latestOffset(end, ReadAllAvailable())
    assert later == {topic: {"0": 13}}
    assert read_all(source, end, later) == [200]


def test_available_now_reads_to_the_ends_as_of_the_start_and_no_further(kafka):
    topic = "src-bounded"
    kafka.create_topic(topic, 2)
    produce(kafka, topic, range(10), 2)
    source = reader(kafka, topic, maxRecordsPerBatch="4")
    start = source.initialOffset()
    source.prepareForTriggerAvailableNow()
    produce(kafka, topic, range(10, 20), 2)         # after the query started: not read
    seen = []
    while (end := source.latestOffset(start, ReadMaxRows(4))) != start:
        seen += read_all(source, start, end)
        start = end
    assert sorted(seen) == list(range(10))


def test_an_idle_trigger_plans_no_batch_and_no_consumer_stays_assigned_between_batches(kafka):
    topic = "src-idle"
    kafka.create_topic(topic, 2)
    produce(kafka, topic, range(10), 2)
    source = reader(kafka, topic)
    start = source.initialOffset()
    end = source.latestOffset(start, ReadAllAvailable())
    assert sorted(read_all(source, start, end)) == list(range(10))
    # Nothing new: the end is the start, so Spark plans no batch and no task reads (fetches) anything.
    assert source.latestOffset(end, ReadAllAvailable()) == end
    # The process's consumer is unassigned after its range: it fetches nothing while the query idles.
    assert fetch._consumers and all(consumer.assignment() == [] for consumer in fetch._consumers.values())
