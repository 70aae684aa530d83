"""The guarantees of the test broker (``tests/kafkaserver.py``) that the
Kafka source's tests rely on, checked against it: a broker that lost one
must fail here, not let a source or sink test pass.

- ``read_committed`` consumers never see records of aborted transactions,
  nor of open ones, and see committed ones;
- the latest offset listed under ``read_committed`` is the last stable
  offset: it stops before an open transaction;
- records deleted below a new start (as retention deletes them) are gone:
  the earliest offset moves, and a consumer positioned below it gets an
  offset error rather than silently skipping;
- (the Kafka sink's) an offset sent with a transaction, and its metadata, is
  applied when the transaction commits and never when it aborts or stays
  open; a producer initialised with a transactional id fences every earlier
  producer of that id (its commit fails) and aborts the transaction one
  left open, its records never shown and its offsets never applied; a clean
  restart of the broker (the compose stack's chaos test restarts it) keeps
  the committed offsets and their metadata, and a transaction open across
  it is never shown;
- a clean restart keeps every record acknowledged before the stop began,
  each at its offset (offsets are never given to other records: a source
  positioned past one would skip the new one). What this broker does not
  keep: records it acknowledges *during* its stop, a few milliseconds after
  its last save; the chaos test stops the producer before restarting it.
"""

from __future__ import annotations

import signal

import pytest
from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

pytestmark = pytest.mark.integration


def values(bootstrap: str, topic: str, isolation: str, end: int, start: int = 0) -> list[bytes]:
    """Every value of partition 0 from ``start`` a consumer with ``isolation``
    is given, reading until the partition's end (at least ``end``)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "guard", "isolation.level": isolation,
                         "enable.partition.eof": True, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, start)])
    seen, at_end = [], False
    try:
        for _ in range(200):
            for message in consumer.consume(100, timeout=0.2):
                if message.error() is None:
                    seen.append(message.value())
                elif message.error().code() == KafkaError._PARTITION_EOF and message.offset() >= end:
                    at_end = True
            if at_end:
                return seen
    finally:
        consumer.close()
    raise AssertionError(f"{isolation}: never reached the end ({end}) of {topic}; saw {seen}")


def latest(admin: AdminClient, topic: str, level: IsolationLevel) -> int:
    futures = admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.latest()}, isolation_level=level)
    return next(iter(futures.values())).result().offset


def transactional(bootstrap: str, tid: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    producer.init_transactions(10)
    return producer


def test_read_committed_sees_committed_transactions_only_and_stops_before_an_open_one(kafka):
    topic = "guard-transactions"
    kafka.create_topic(topic, 1)
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    committer, aborter, holder = (transactional(kafka.bootstrap, f"guard-{n}") for n in ("c", "a", "h"))
    committer.begin_transaction()
    committer.produce(topic, b"committed-1", partition=0)
    committer.produce(topic, b"committed-2", partition=0)
    committer.commit_transaction(10)
    aborter.begin_transaction()
    aborter.produce(topic, b"aborted", partition=0)
    aborter.flush(10)
    aborter.abort_transaction(10)
    holder.begin_transaction()
    holder.produce(topic, b"open", partition=0)
    holder.flush(10)

    stable = latest(admin, topic, IsolationLevel.READ_COMMITTED)
    high = latest(admin, topic, IsolationLevel.READ_UNCOMMITTED)
    assert stable < high, f"the last stable offset ({stable}) is not before the open transaction (high {high})"
    # The test wrote what it claims: an uncommitted reader sees all of it.
    assert values(kafka.bootstrap, topic, "read_uncommitted", high) == \
        [b"committed-1", b"committed-2", b"aborted", b"open"]
    assert values(kafka.bootstrap, topic, "read_committed", stable) == [b"committed-1", b"committed-2"]

    holder.commit_transaction(10)
    stable = latest(admin, topic, IsolationLevel.READ_COMMITTED)
    assert stable == latest(admin, topic, IsolationLevel.READ_UNCOMMITTED)
    assert values(kafka.bootstrap, topic, "read_committed", stable) == [b"committed-1", b"committed-2", b"open"]


def test_deleted_records_move_the_earliest_offset_and_a_reader_below_it_gets_an_error(kafka):
    topic = "guard-retention"
    kafka.create_topic(topic, 1)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for n in range(10):
        producer.produce(topic, str(n).encode(), partition=0)
    producer.flush(10)
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    deleted = admin.delete_records([TopicPartition(topic, 0, 6)])
    next(iter(deleted.values())).result(10)
    earliest = admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.earliest()})
    assert next(iter(earliest.values())).result().offset == 6

    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "guard", "auto.offset.reset": "error",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 2)])
    try:
        for _ in range(100):
            message = consumer.poll(0.2)
            if message is None:
                continue
            assert message.error() is not None, f"read offset {message.offset()}, below the partition's start (6)"
            assert message.error().code() == KafkaError._AUTO_OFFSET_RESET
            return
    finally:
        consumer.close()
    raise AssertionError("no error for a position below the partition's start")


def mark_group(bootstrap: str, group: str) -> Consumer:
    """A consumer holding ``group``, whose offsets a transactional producer sends."""
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                     "isolation.level": "read_committed"})


def committed(consumer: Consumer, topic: str) -> tuple[int, str]:
    [offset] = consumer.committed([TopicPartition(topic, 0)], 10)
    return offset.offset, offset.metadata


def test_offsets_sent_with_a_transaction_apply_when_it_commits_only_and_a_new_producer_fences_the_old(kafka):
    topic = "guard-sink"
    kafka.create_topic(topic, 1)
    group = mark_group(kafka.bootstrap, "guard-sink-mark")
    old = transactional(kafka.bootstrap, "guard-sink")

    def send(producer: Producer, value: bytes, offset: int) -> None:
        producer.begin_transaction()
        producer.produce(topic, value, partition=0)
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, offset, metadata=f"mark {offset}")],
                                             group.consumer_group_metadata(), 10)
        producer.flush(10)

    try:
        send(old, b"committed", 5)
        old.commit_transaction(10)
        assert committed(group, topic) == (5, "mark 5")
        send(old, b"aborted", 6)
        assert committed(group, topic) == (5, "mark 5"), "an open transaction's offset was applied"
        old.abort_transaction(10)
        assert committed(group, topic) == (5, "mark 5"), "an aborted transaction's offset was applied"

        send(old, b"zombie", 7)                       # left open: its producer is about to be replaced
        new = transactional(kafka.bootstrap, "guard-sink")
        with pytest.raises(KafkaException) as fenced:
            old.commit_transaction(10)
        assert fenced.value.args[0].code() == KafkaError._FENCED
        assert committed(group, topic) == (5, "mark 5"), "the fenced producer's offset was applied"
        send(new, b"after", 8)
        new.commit_transaction(10)
        assert committed(group, topic) == (8, "mark 8")
        end = latest(AdminClient({"bootstrap.servers": kafka.bootstrap}), topic, IsolationLevel.READ_COMMITTED)
        assert values(kafka.bootstrap, topic, "read_uncommitted", end) == [b"committed", b"aborted", b"zombie",
                                                                           b"after"]
        assert values(kafka.bootstrap, topic, "read_committed", end) == [b"committed", b"after"]
    finally:
        group.close()


def test_a_clean_restart_keeps_committed_offsets_and_never_shows_a_transaction_open_across_it(kafka):
    topic = "guard-restart"
    kafka.create_topic(topic, 1)
    group = mark_group(kafka.bootstrap, "guard-restart-mark")
    producer = transactional(kafka.bootstrap, "guard-restart")
    try:
        for value, offset in ((b"committed", 3), (b"open", 4)):
            producer.begin_transaction()
            producer.produce(topic, value, partition=0)
            producer.send_offsets_to_transaction([TopicPartition(topic, 0, offset, metadata=f"mark {offset}")],
                                                 group.consumer_group_metadata(), 10)
            producer.flush(10)
            if value == b"committed":
                producer.commit_transaction(10)
        kafka.kill(signal.SIGTERM)
        kafka.start()
        assert committed(group, topic) == (3, "mark 3")
        after = transactional(kafka.bootstrap, "guard-restart")
        after.begin_transaction()
        after.produce(topic, b"after", partition=0)
        after.commit_transaction(10)
        end = latest(AdminClient({"bootstrap.servers": kafka.bootstrap}), topic, IsolationLevel.READ_COMMITTED)
        assert values(kafka.bootstrap, topic, "read_committed", end) == [b"committed", b"after"]
        assert committed(group, topic) == (3, "mark 3")
    finally:
        group.close()


def test_a_clean_restart_keeps_every_acknowledged_record_at_its_offset(kafka):
    topic = "guard-restart-records"
    kafka.create_topic(topic, 2)
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5})
    acknowledged: dict[tuple[int, int], bytes] = {}

    def delivered(error, message) -> None:
        assert error is None, error
        acknowledged[(message.partition(), message.offset())] = message.value()
    for i in range(2000):
        producer.produce(topic, str(i).encode(), partition=i % 2, on_delivery=delivered)
        if i % 100 == 99:
            producer.poll(0)
    assert producer.flush(10) == 0 and len(acknowledged) == 2000
    kafka.kill(signal.SIGTERM)
    kafka.start()
    for partition in (0, 1):
        consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "guard", "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, partition, 0)])
        held: dict[tuple[int, int], bytes] = {}
        try:
            for _ in range(20):
                if len(held) >= 1000:
                    break
                for message in consumer.consume(500, timeout=1):
                    assert message.error() is None, message.error()
                    held[(partition, message.offset())] = message.value()
        finally:
            consumer.close()
        assert held == {key: value for key, value in acknowledged.items() if key[0] == partition}


@pytest.mark.xfail(strict=True, reason=(
    "noida-db 0.2.3 lists aborted transactions that ended before the fetch offset: a read_committed reader "
    "starting after a producer's aborted transaction drops that producer's later committed records (Kafka lists "
    "only the aborted transactions a fetch overlaps). It hides records, never shows aborted ones: a test it "
    "affects fails rather than passes. Strict: when a broker version fixes it, this fails and must be removed."))
def test_a_reader_starting_after_an_abort_sees_the_same_producers_later_commits(kafka):
    topic = "guard-after-abort"
    kafka.create_topic(topic, 1)
    producer = transactional(kafka.bootstrap, "guard-after-abort")
    for value, commit in ((b"first", True), (b"aborted", False), (b"second", True)):
        producer.begin_transaction()
        producer.produce(topic, value, partition=0)
        producer.flush(10)
        producer.commit_transaction(10) if commit else producer.abort_transaction(10)
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    end = latest(admin, topic, IsolationLevel.READ_COMMITTED)
    assert values(kafka.bootstrap, topic, "read_committed", end) == [b"first", b"second"]
    # From offset 4 (after the aborted transaction's marker at 3): the second commit only.
    assert values(kafka.bootstrap, topic, "read_committed", end, start=4) == [b"second"]
