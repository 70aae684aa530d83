"""The producer's Kafka target (``SP_PRODUCER_KAFKA_BOOTSTRAP``) against a
real broker: the topic created with the producer's partitions, trades keyed
and partitioned by symbol as the event log partitions them, and a restarted
producer continuing after the largest id the topic holds."""

from __future__ import annotations

import pytest

from sparkpoint.eventlog import partition_for_key
from sparkpoint.producer import ProducerSettings, run
from tests.kafkaserver import read_committed

pytestmark = pytest.mark.integration


def test_the_producer_creates_its_topic_keys_by_symbol_and_a_restart_continues_its_ids(kafka):
    settings = {"SP_PRODUCER_KAFKA_BOOTSTRAP": kafka.bootstrap, "SP_PRODUCER_LOG": "producer-trades",
                "SP_PRODUCER_PARTITIONS": "3", "SP_PRODUCER_RATE": "100000"}
    run(ProducerSettings.from_env({**settings, "SP_PRODUCER_COUNT": "500"}))
    run(ProducerSettings.from_env({**settings, "SP_PRODUCER_COUNT": "300", "SP_PRODUCER_SEED": "2"}))
    records = read_committed(kafka.bootstrap, "producer-trades", 3)
    assert sorted(value["id"] for _, _, value in records) == list(range(800))
    assert all(key == value["sym"].encode() and partition == partition_for_key(value["sym"], 3)
               for partition, key, value in records)
