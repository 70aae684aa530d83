"""Kafka target (``sp.write.to_kafka(topic)``): staged batches produced inside
a Kafka transaction when a checkpoint covering them completes.

- One transactional producer per worker index and sink
  (``transactional.id`` = ``sparkpoint.<worker>.<sink>``): whatever resumes
  the index -- a restarted worker, a standby taking over -- calls
  ``init_transactions``, which fences every earlier producer of that id (a
  zombie's produce or commit fails) and aborts the transaction it left open,
  or finishes the commit it had sent.
- The mark ("published up to checkpoint k, batch b") travels in the same
  transaction as the records: ``send_offsets_to_transaction`` commits it,
  as the metadata of an offset of the group ``sparkpoint-sink.<worker>.<sink>``
  (the offset: the batch, plus one). It is applied when, and only when, the
  transaction commits. After an error whose outcome is unknown (a commit that
  timed out, a broker gone mid-commit) the publisher resumes: a new producer's
  ``init_transactions`` settles the transaction either way, and the group's
  offset then says whether it committed. Nothing is produced twice for a
  ``read_committed`` consumer.
- The mark carries the fence of the worker's checkpoint volume as the last
  process to resume or publish held it: a process holding an earlier
  generation is refused (``Fenced``) when it resumes.

Records: each row as a JSON object (timestamps and dates in ISO 8601,
binary in base64, decimals as strings), keyed by the ``key`` column's value
if one is given (then partitioned by murmur2 of the key, as Kafka's Java
producer does).
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from sparkpoint.faults import NO_FAULTS, FaultInjector
from sparkpoint.messages import VolumeFence
from worker.publishing.book import Mark
from worker.publishing.staging import StagedBatch
from worker.publishing.targets import Outcome, check_fence
from worker.sources.kafka.broker import CONSUMER_ONLY, PRODUCER_ONLY, client_config

log = logging.getLogger("sparkpoint.worker.publisher")

# librdkafka's default, and Kafka's transaction.max.timeout.ms default is 15 min.
DEFAULT_TRANSACTION_TIMEOUT_MS = 60_000
# A call to the brokers (init, commit, reading the mark) waits at most this long.
REQUEST_TIMEOUT_S = 30.0
# A transactional call not back this long after its own timeout is given up (``bounded``).
HUNG_AFTER_S = REQUEST_TIMEOUT_S + 10.0
T = TypeVar("T")


def transactional_id(worker_id: str, sink: str) -> str:
    return f"sparkpoint.{worker_id}.{sink}"


def mark_group(worker_id: str, sink: str) -> str:
    """The consumer group whose offset holds the sink's mark."""
    return f"sparkpoint-sink.{worker_id}.{sink}"


def transaction_timeout_ms(config: Mapping[str, str]) -> int:
    return int(config.get("transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS))


def required_transaction_timeout_ms(checkpoint_freq_ms: int, heartbeat_timeout_ms: int) -> int:
    """The shortest ``transaction.timeout.ms`` a Kafka sink accepts: a publish
    after a take-over produces what was staged since the last publish before
    the crash -- about a checkpoint interval and a heartbeat timeout of
    output -- and must commit before the broker aborts it; twice that."""
    return 2 * (checkpoint_freq_ms + heartbeat_timeout_ms)


def _json_value(value: Any) -> Any:
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, decimal.Decimal):
        return str(value)
    raise TypeError(f"no JSON form for {type(value).__name__}")


def encode(row: Mapping[str, Any]) -> bytes:
    return json.dumps(row, default=_json_value, separators=(",", ":"), ensure_ascii=False).encode()


def encode_key(value: Any) -> bytes | None:
    """A key column's value as a record key: a string's UTF-8, anything else its JSON."""
    if value is None:
        return None
    return value.encode() if isinstance(value, str) else json.dumps(value, default=_json_value).encode()


# The mark of a sink that published nothing yet, claimed by a fence.
NOTHING_PUBLISHED = Mark(0, -1)


def _mark_metadata(mark: Mark, fence: VolumeFence) -> str:
    return json.dumps({"checkpoint_id": mark.checkpoint_id, "batch_id": mark.batch_id,
                       "fence": [fence.volume_id, fence.generation]})


def _parse_mark(metadata: str) -> tuple[Mark, VolumeFence]:
    data = json.loads(metadata)
    volume_id, generation = data["fence"]
    mark = Mark(int(data["checkpoint_id"]), int(data["batch_id"]))
    return (mark if mark.batch_id >= 0 else None), VolumeFence(str(volume_id), int(generation))


class KafkaTopicMissing(RuntimeError):
    """The sink's topic does not exist (and the sink may not create it)."""


class KafkaCallHung(RuntimeError):
    """A transactional call did not return, past its own timeout."""


def bounded(call: Callable[[], T], what: str, timeout_s: float = HUNG_AFTER_S) -> T:
    """``call()``, given up after ``timeout_s`` (``KafkaCallHung``). librdkafka's
    transactional calls can wait past their own timeout -- forever, seen with a
    broker restarted under a producer: ``send_offsets_to_transaction`` retried
    its AddOffsetsToTxn and never went on. The call runs in a daemon thread; a
    given-up one is left behind with its producer, which the next producer's
    ``init_transactions`` fences."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread below
            outcome["error"] = error

    thread = threading.Thread(target=run, name=f"sparkpoint-kafka-{what}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise KafkaCallHung(f"Kafka's {what} did not return in {timeout_s:.0f} s; a new producer takes over")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


class KafkaTransactionalTarget:
    def __init__(self, config: Mapping[str, str], config_files: Mapping[str, str], topic: str, *, sink: str,
                 worker_id: str, key: str | None = None, create: bool = False, fence: VolumeFence = VolumeFence(),
                 faults: FaultInjector = NO_FAULTS) -> None:
        """``config``, ``config_files``: librdkafka properties (``bootstrap.servers``
        among them) and those read from files (``WorkerSettings.kafka``);
        ``create``: create the topic (the brokers' default partitions and
        replication) if it is missing; ``fence``: this process's of the
        worker's checkpoint volume."""
        self.topic = topic
        self.sink = sink
        self.worker_id = worker_id
        self.key = key
        self.description = f"Kafka topic {topic} (transactional)"
        self._config = {**client_config(config, config_files),
                        "transaction.timeout.ms": str(transaction_timeout_ms(config))}
        self._create = create
        self._fence = fence
        self._faults = faults
        self._producer: Any = None
        self._broken = False            # the producer's client reported an error since it was made
        self._consumer: Any = None      # holds the group whose offset is the mark
        self._mark: Mark | None = None

    # -- clients ---------------------------------------------------------------------
    def _producer_config(self) -> dict[str, str]:
        config = {"partitioner": "murmur2_random"}
        config.update((k, v) for k, v in self._config.items() if k not in CONSUMER_ONLY)
        config["transactional.id"] = transactional_id(self.worker_id, self.sink)
        config["error_cb"] = self._client_error
        return config

    def _client_error(self, error: Any) -> None:
        """librdkafka's error callback (served by ``poll``): a broker's connection broke."""
        self._broken = True

    def _mark_consumer(self) -> Any:
        if self._consumer is None:
            from confluent_kafka import Consumer

            config = {k: v for k, v in self._config.items() if k not in PRODUCER_ONLY}
            config.update({"group.id": mark_group(self.worker_id, self.sink), "enable.auto.commit": "false",
                           "isolation.level": "read_committed"})
            self._consumer = Consumer(config)
        return self._consumer

    # -- the Target protocol -------------------------------------------------------------
    def resume(self) -> Mark | None:
        """Steps:
        1. Make sure the topic exists (create it if the sink may).
        2. Read the mark: ``Fenced`` if a later holder of the index claimed
           it (checked before step 3, which would fence that holder's producer).
        3. A new transactional producer: ``init_transactions`` fences every
           earlier one of this index and sink, and settles the transaction
           one left open (aborted, or its commit finished).
        4. Read the mark again (step 3 may have finished a commit); ``Fenced``
           as in step 2.
        5. Claim it for this process's fence (a transaction holding the same
           mark) unless it carries that fence already.
        """
        from confluent_kafka import Producer

        # 1.
        self._ensure_topic()
        # 2.
        check_fence(self._read_mark()[1], self._fence, self.description)
        # 3.
        self._drop_producer()
        producer = Producer(self._producer_config())
        self._broken = False
        bounded(lambda: producer.init_transactions(REQUEST_TIMEOUT_S), "init_transactions")
        self._producer = producer
        # 4.
        mark, stored = self._read_mark()
        check_fence(stored, self._fence, self.description)
        # 5.
        if stored != self._fence:
            self._commit(mark or NOTHING_PUBLISHED)
        self._mark = mark
        return mark

    def rewind(self, mark: Mark) -> None:
        """The older mark; the records published past it stay in the topic
        (consumers may have read them) and are published again."""
        self._commit(mark)
        self._mark = mark

    def publish(self, batches: Sequence[StagedBatch], mark: Mark) -> Outcome:
        """One Kafka transaction. Steps:
        0. If a broker's connection broke since the last publish, resume
           first (a new producer): librdkafka's transactional calls can hang
           on a coordinator that restarted (``bounded``). A mark that moved
           meanwhile: ``MARK_MOVED``.
        1. Begin the transaction.
        2. Produce every staged row.
        3. Send the mark with the transaction (the group's offset).
        4. Commit: the commit point. An error here leaves the outcome unknown:
           the publisher resumes, and the mark then says.
        """
        from confluent_kafka import KafkaException

        # 0.
        self._producer.poll(0)
        if self._broken:
            planned = self._mark
            if self.resume() != planned:
                return Outcome.MARK_MOVED
        producer = self._producer
        try:
            # 1.
            producer.begin_transaction()
            self._faults.hit("publish.kafka_begun")
            # 2.
            produced = 0
            for batch in batches:
                table = batch.read()
                if table is None:
                    continue
                for row in table.to_pylist():
                    self._produce(producer, row)
                    produced += 1
                    if produced == 1 and self._faults.point == "publish.kafka_producing":
                        producer.flush(REQUEST_TIMEOUT_S)      # tests: the first record on the broker
                        self._faults.hit("publish.kafka_producing")
            # 3.
            self._send_mark(producer, mark)
            producer.flush(REQUEST_TIMEOUT_S)
            self._faults.hit("publish.kafka_produced")
            # 4.
            bounded(lambda: producer.commit_transaction(REQUEST_TIMEOUT_S), "commit_transaction")
        except KafkaException as error:
            if error.args[0].txn_requires_abort():
                bounded(lambda: producer.abort_transaction(REQUEST_TIMEOUT_S), "abort_transaction")
            raise
        self._faults.hit("publish.kafka_committed")
        self._mark = mark
        return Outcome.PUBLISHED

    def close(self) -> None:
        self._drop_producer()
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    # -- helpers ---------------------------------------------------------------------------
    def _drop_producer(self) -> None:
        """Its undelivered records purged: the next producer's init aborts the
        transaction they belong to (or finishes a commit already sent)."""
        if self._producer is not None:
            self._producer.purge(blocking=False)     # not waiting on a call that may hang
            self._producer = None

    def _produce(self, producer: Any, row: dict[str, Any]) -> None:
        key = encode_key(row.get(self.key)) if self.key else None
        value = encode(row)
        while True:
            try:
                producer.produce(self.topic, value, key)
                return
            except BufferError:         # the client's queue is full: let it deliver
                producer.poll(0.1)

    def _send_mark(self, producer: Any, mark: Mark) -> None:
        from confluent_kafka import TopicPartition

        offset = TopicPartition(self.topic, 0, mark.batch_id + 1, metadata=_mark_metadata(mark, self._fence))
        group = self._mark_consumer().consumer_group_metadata()
        bounded(lambda: producer.send_offsets_to_transaction([offset], group, REQUEST_TIMEOUT_S),
                "send_offsets_to_transaction")

    def _commit(self, mark: Mark) -> None:
        """A transaction holding only ``mark`` (with this process's fence)."""
        from confluent_kafka import KafkaException

        producer = self._producer
        producer.begin_transaction()
        try:
            self._send_mark(producer, mark)
            bounded(lambda: producer.commit_transaction(REQUEST_TIMEOUT_S), "commit_transaction")
        except KafkaException as error:
            if error.args[0].txn_requires_abort():
                bounded(lambda: producer.abort_transaction(REQUEST_TIMEOUT_S), "abort_transaction")
            raise

    def _read_mark(self) -> tuple[Mark | None, VolumeFence]:
        from confluent_kafka import TopicPartition

        [committed] = self._mark_consumer().committed([TopicPartition(self.topic, 0)], REQUEST_TIMEOUT_S)
        if committed.offset < 0 or not committed.metadata:
            return None, VolumeFence()
        return _parse_mark(committed.metadata)

    def _ensure_topic(self) -> None:
        from confluent_kafka import KafkaError, KafkaException, TopicCollection
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({k: v for k, v in self._config.items() if k not in CONSUMER_ONLY + PRODUCER_ONLY})
        future = admin.describe_topics(TopicCollection([self.topic]), request_timeout=REQUEST_TIMEOUT_S)[self.topic]
        try:
            future.result()
            return
        except KafkaException as error:
            if error.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise
        if not self._create:
            raise KafkaTopicMissing(f"Kafka topic {self.topic!r} does not exist: create it, or let the sink "
                                    f"create it (to_kafka({self.topic!r}, create=True))")
        created = admin.create_topics([NewTopic(self.topic)], request_timeout=REQUEST_TIMEOUT_S)[self.topic]
        try:
            created.result()
        except KafkaException as error:
            if error.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        log.info("sink %s: created Kafka topic %s", self.sink, self.topic)
