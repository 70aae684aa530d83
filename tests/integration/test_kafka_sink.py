"""The Kafka sink's target (``worker.publishing.targets.kafka``) driven by the
worker's publisher against a real broker (``tests/kafkaserver.py``, whose
transactions and fencing ``test_kafka_broker.py`` checks): a worker killed at
each step of a publish (its fault point checked to have fired) publishes
every row exactly once for a ``read_committed`` consumer after it resumes;
a zombie is fenced; a missing topic is named."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from sparkpoint.faults import FaultInjector
from sparkpoint.messages import SinkContract, VolumeFence
from tests.kafkaserver import read_committed
from worker.publishing.book import Contract, Mark, SinkBook
from worker.publishing.publisher import Publication, Publisher
from worker.publishing.staging import StagingArea, batch_dir_name
from worker.publishing.targets import Fenced
from worker.publishing.targets.kafka import KafkaTopicMissing, KafkaTransactionalTarget

pytestmark = pytest.mark.integration

ROWS_PER_BATCH = 40
SYMBOLS = ("AAPL", "MSFT", "IBM", "ORCL")
VOLUME = "volume-a"


def stage(root: Path, batches: range) -> None:
    """Staged batches as the worker's stager leaves them: ``ROWS_PER_BATCH`` trades each."""
    for batch in batches:
        directory = root / "run" / batch_dir_name(batch)
        directory.mkdir(parents=True)
        ids = range(batch * ROWS_PER_BATCH, (batch + 1) * ROWS_PER_BATCH)
        pq.write_table(pa.table({"id": list(ids), "sym": [SYMBOLS[i % 4] for i in ids],
                                 "price": [100.0 + i / 8 for i in ids]}), directory / "0000.parquet")


def target(bootstrap: str, topic: str, *, generation: int = 1, fault: str = "", sentinels: Path = Path("."),
           create: bool = False) -> KafkaTransactionalTarget:
    return KafkaTransactionalTarget({"bootstrap.servers": bootstrap}, {}, topic, sink="trades_out",
                                    worker_id="worker-0", key="sym", create=create,
                                    fence=VolumeFence(VOLUME, generation), faults=FaultInjector(fault, sentinels))


@pytest.fixture
def targets(kafka):
    """``target`` on the session's broker; each one made is closed after the test."""
    made: list[KafkaTransactionalTarget] = []

    def make(topic: str, **options) -> KafkaTransactionalTarget:
        made.append(target(kafka.bootstrap, topic, **options))
        return made[-1]

    yield make
    for each in made:
        each.close()


def publish_through(kafka_target: KafkaTransactionalTarget, staging: Path, checkpoint_id: int,
                    batch_id: int) -> Publication:
    """The worker's publisher, resumed, with checkpoint ``checkpoint_id`` (at
    ``batch_id``) durable and complete: one pass publishes what it covers."""
    publication = Publication(name="trades_out", query="trades_out", contract=SinkContract.TRANSACTIONAL,
                              book=SinkBook(Contract.ON_COMPLETION, complete=False), target=kafka_target,
                              staging=StagingArea(staging, "run"))
    publisher = Publisher([publication])
    assert publisher.resume_all(threading.Event())
    publication.book.durable(checkpoint_id, batch_id)
    publisher.completed(checkpoint_id)
    publisher.step()
    return publication


# A worker's publish in a process of its own, killed (SIGKILL) at its fault point.
CHILD = """
import sys
from pathlib import Path
from tests.integration.test_kafka_sink import publish_through, target
bootstrap, topic, fault, sentinels, staging = sys.argv[1:]
publication = publish_through(target(bootstrap, topic, fault=fault, sentinels=Path(sentinels)), Path(staging), 1, 2)
print(publication.health.error or f"published {publication.book.mark}")
"""


@pytest.mark.parametrize("point", ["publish.kafka_begun", "publish.kafka_producing", "publish.kafka_produced",
                                   "publish.kafka_committed"])
def test_a_worker_killed_at_each_step_of_a_publish_has_every_row_published_once_after_it_resumes(
        kafka, targets, tmp_path, point):
    topic = f"sink-{point.rsplit('_', 1)[1]}"
    kafka.create_topic(topic, 3)
    staging = tmp_path / "staging"
    stage(staging, range(6))
    child = subprocess.run([sys.executable, "-c", CHILD, kafka.bootstrap, topic, point, str(tmp_path), str(staging)],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, f"the fault {point} did not fire: {child.stdout}{child.stderr}"
    assert (tmp_path / f".fault-{point}").exists()

    # The worker resumes (a later holder of the index): checkpoint 2 covers every batch.
    resumed = publish_through(targets(topic, generation=2), staging, 2, 5)
    assert resumed.health.error == ""
    assert resumed.book.mark == Mark(2, 5)
    records = read_committed(kafka.bootstrap, topic, 3)
    ids = [value["id"] for _, _, value in records]
    assert sorted(ids) == list(range(6 * ROWS_PER_BATCH)), \
        f"{len(ids) - len(set(ids))} rows twice, {6 * ROWS_PER_BATCH - len(set(ids))} missing"
    assert all(key == value["sym"].encode() for _, key, value in records)
    # Keyed: every record of a symbol in one partition, in publish order.
    assert [v["id"] for _, _, v in records if v["sym"] == "IBM"] == sorted(i for i in ids if SYMBOLS[i % 4] == "IBM")


def test_a_zombie_is_fenced_by_the_next_holder_and_nothing_it_produced_is_seen(kafka, targets, tmp_path):
    topic = "sink-zombie"
    kafka.create_topic(topic, 1)
    stage(tmp_path / "zombie", range(2))
    stage(tmp_path / "holder", range(2))
    zombie = targets(topic, generation=1)
    assert zombie.resume() is None
    holder = targets(topic, generation=2)
    assert holder.resume() is None

    with pytest.raises(KafkaException) as fenced:
        zombie.publish([StagingArea(tmp_path / "zombie", "run").batch(b) for b in range(2)], Mark(1, 1))
    # Fenced in a transactional call, or (the fence reached the client in the background, while it
    # was adding the topic's partition to the transaction) the producer already failed fatally.
    assert fenced.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                           KafkaError.INVALID_PRODUCER_EPOCH, KafkaError._FATAL)
    with pytest.raises(Fenced, match="generation 2"):
        zombie.resume()                 # refused before its producer could fence the holder's
    holder.publish([StagingArea(tmp_path / "holder", "run").batch(0)], Mark(1, 0))
    assert holder.resume() == Mark(1, 0)
    assert sorted(value["id"] for _, _, value in read_committed(kafka.bootstrap, topic, 1)) == \
        list(range(ROWS_PER_BATCH))


def test_a_missing_topic_is_named_and_created_only_when_the_sink_may(kafka, targets, tmp_path):
    with pytest.raises(KafkaTopicMissing, match="'sink-missing' does not exist.*create=True"):
        targets("sink-missing").resume()
    assert "sink-missing" not in AdminClient({"bootstrap.servers": kafka.bootstrap}).list_topics(timeout=10).topics
    stage(tmp_path, range(1))
    created = publish_through(targets("sink-created", create=True), tmp_path, 1, 0)
    assert created.book.mark == Mark(1, 0)
    partitions = len(AdminClient({"bootstrap.servers": kafka.bootstrap}).list_topics(timeout=10)
                     .topics["sink-created"].partitions)
    assert len(read_committed(kafka.bootstrap, "sink-created", partitions)) == ROWS_PER_BATCH
