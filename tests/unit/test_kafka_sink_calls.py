"""The Kafka sink's guard on librdkafka's transactional calls
(``worker.publishing.targets.kafka.bounded``): a call that does not return
is given up, with an error naming it; values and errors pass through."""

from __future__ import annotations

import threading

import pytest

from worker.publishing.targets.kafka import KafkaCallHung, bounded


def test_a_call_that_never_returns_is_given_up_naming_it():
    release = threading.Event()
    try:
        with pytest.raises(KafkaCallHung, match="Kafka's send_offsets_to_transaction did not return in 0 s"):
            bounded(release.wait, "send_offsets_to_transaction", timeout_s=0.05)
    finally:
        release.set()


def test_a_calls_value_and_error_pass_through():
    assert bounded(lambda: 42, "commit_transaction") == 42
    with pytest.raises(ValueError, match="refused"):
        bounded(lambda: (_ for _ in ()).throw(ValueError("refused")), "commit_transaction")
