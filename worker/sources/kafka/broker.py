"""What the reader asks the brokers while planning: partitions and offsets.

One admin client per reader, made on first use (the reader is pickled to
Spark's Python processes before it is used). ``latest`` is the last stable
offset under ``read_committed`` (records of open transactions are not
offered), the high watermark under ``read_uncommitted``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from worker.sources.kafka.offsets import Offsets, TopicPartition

# Planning waits at most this long for a metadata or offsets answer.
REQUEST_TIMEOUT_S = 10.0
# Properties of SP_KAFKA_CONFIG only consumers take, and only producers (the
# Kafka sink's): each client is given its own (librdkafka warns of the other's).
CONSUMER_ONLY = ("isolation.level",)
PRODUCER_ONLY = ("transaction.timeout.ms",)


def client_config(config: Mapping[str, str], config_files: Mapping[str, str]) -> dict[str, str]:
    """A consumer's librdkafka properties, those in ``config_files`` read from
    their files (secrets: read where the client runs, never passed through Spark)."""
    resolved = {prop: value for prop, value in config.items() if prop not in PRODUCER_ONLY}
    for prop, path in config_files.items():
        resolved[prop] = Path(path).read_text().strip()
    resolved.setdefault("isolation.level", "read_committed")
    return resolved


class BrokerUnavailable(RuntimeError):
    """The brokers did not answer (unreachable, or a topic missing): no new batch this trigger."""


class Broker:
    def __init__(self, config: Mapping[str, str]) -> None:
        """``config``: as ``client_config`` makes it."""
        self._config = dict(config)
        self._read_committed = self._config["isolation.level"] == "read_committed"
        self._admin: Any = None

    def _client(self) -> Any:
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(self._config)
        return self._admin

    def partitions(self, topics: Iterable[str]) -> dict[str, int]:
        """Each topic's partition count; BrokerUnavailable naming a missing topic.
        (Described, not listed by name: a metadata request naming a topic may
        create it, where the broker creates topics on first use.)"""
        from confluent_kafka import KafkaError, KafkaException, TopicCollection

        wanted = sorted(set(topics))
        futures = self._client().describe_topics(TopicCollection(wanted), request_timeout=REQUEST_TIMEOUT_S)
        counts: dict[str, int] = {}
        for topic in wanted:
            try:
                counts[topic] = len(futures[topic].result().partitions)
            except KafkaException as error:
                if error.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise BrokerUnavailable(f"Kafka topic {topic!r} does not exist") from None
                raise BrokerUnavailable(f"Kafka at {self._config.get('bootstrap.servers')}: {error}") from None
        return counts

    def offsets(self, partitions: Iterable[TopicPartition]) -> tuple[Offsets, Offsets]:
        """The earliest and latest offset of each partition."""
        from confluent_kafka import IsolationLevel, KafkaException
        from confluent_kafka import TopicPartition as KafkaPartition
        from confluent_kafka.admin import OffsetSpec

        wanted = sorted(partitions)
        level = IsolationLevel.READ_COMMITTED if self._read_committed else IsolationLevel.READ_UNCOMMITTED
        answers = []
        for spec in (OffsetSpec.earliest(), OffsetSpec.latest()):
            futures = self._client().list_offsets({KafkaPartition(t, p): spec for t, p in wanted},
                                                  isolation_level=level, request_timeout=REQUEST_TIMEOUT_S)
            try:
                answers.append({(tp.topic, tp.partition): future.result().offset for tp, future in futures.items()})
            except KafkaException as error:
                raise BrokerUnavailable(f"Kafka at {self._config.get('bootstrap.servers')}: listing offsets "
                                        f"failed: {error}") from None
        return answers[0], answers[1]
