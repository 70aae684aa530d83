"""The producer's Kafka target (``SP_PRODUCER_KAFKA_BOOTSTRAP``): trade events
as JSON records of a topic, keyed and partitioned by symbol as the event
log partitions them (worker ``i`` of ``n`` reads partitions ``p % n == i``
of either).

An idempotent producer (``acks=all``): within a partition, what the broker
holds is a prefix of what was sent, in order, each record once. Ids go up
in send order, so a restarted producer continues after the largest id any
partition's last record holds: ids of a tick lost in a crash are skipped,
never reused. Each tick's events are acknowledged before the next tick, and
then a heartbeat file is touched (the container's health check reads it).
An error ends the producer (its container restarts it): a fatal one, such
as sequence numbers a restarted broker forgot, cannot be recovered in place.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sparkpoint.eventlog import partition_for_key

# Touched after each acknowledged tick: docker/healthcheck-producer.py checks its age.
HEARTBEAT = Path(tempfile.gettempdir()) / "sparkpoint-producer-heartbeat"
REQUEST_TIMEOUT_S = 30.0


class KafkaTarget:
    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.topic = topic
        self.description = f"Kafka topic {topic} at {bootstrap}"
        self._config = {"bootstrap.servers": bootstrap}
        self.partitions = self._ensure_topic(partitions)
        self._producer = Producer({**self._config, "enable.idempotence": "true", "acks": "all", "linger.ms": "20"})

    def _ensure_topic(self, partitions: int) -> int:
        """The topic's partition count, created with ``partitions`` if missing
        (retried until the brokers answer). Described, never named in a
        metadata request: a broker may create a topic so named, with its
        default partitions."""
        admin = AdminClient(self._config)
        while True:
            try:
                try:
                    described = admin.describe_topics(TopicCollection([self.topic]))[self.topic]
                    return len(described.result(REQUEST_TIMEOUT_S).partitions)
                except KafkaException as error:
                    if error.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                        raise
                created = admin.create_topics([NewTopic(self.topic, partitions)])[self.topic]
                created.result(REQUEST_TIMEOUT_S)
            except KafkaException as error:
                print(f"producer: Kafka not ready ({error}); retrying", flush=True)
                time.sleep(1.0)

    def next_id(self) -> int:
        """One past the largest id of the partitions' last records (0: an empty topic)."""
        consumer = Consumer({**self._config, "group.id": "sparkpoint-producer", "enable.auto.commit": "false"})
        try:
            last = -1
            for partition in range(self.partitions):
                low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, partition),
                                                           timeout=REQUEST_TIMEOUT_S)
                if high <= low:
                    continue
                consumer.assign([TopicPartition(self.topic, partition, high - 1)])
                message = None
                while message is None or message.error():
                    message = consumer.poll(REQUEST_TIMEOUT_S)
                last = max(last, json.loads(message.value())["id"])
            return last + 1
        finally:
            consumer.close()

    def append(self, events: list[dict]) -> None:
        """Produce ``events``; return once the brokers acknowledged every one."""
        failed: list[str] = []

        def delivered(error, _message) -> None:
            if error is not None:
                failed.append(str(error))

        try:
            for event in events:
                self._producer.produce(self.topic, json.dumps(event).encode(), event["sym"].encode(),
                                       partition=partition_for_key(event["sym"], self.partitions),
                                       on_delivery=delivered)
            remaining = self._producer.flush(REQUEST_TIMEOUT_S)
        except KafkaException as error:     # fatal (say, sequence numbers lost by a restarted broker)
            raise ConnectionError(f"{self.description}: {error.args[0].str()}") from None
        if failed or remaining:
            raise ConnectionError(f"{self.description}: {len(failed) + remaining} events not acknowledged "
                                  f"({(failed or ['timed out'])[0]})")
        HEARTBEAT.touch()

    def close(self) -> None:
        self._producer.flush(REQUEST_TIMEOUT_S)
