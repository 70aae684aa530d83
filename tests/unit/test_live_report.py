"""The progress report a run builds (``worker.lifecycle.live``): why it
waits before its queries run, and each Kafka query's data losses gone past
(counted from the file its source records them in, each loss once)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from sparkpoint.messages import QueryProgress
from worker.control.commands import CommandBook
from worker.lifecycle.live import LiveRun
from worker.sources.kafka import losses as kafka_losses
from worker.sources.kafka.offsets import DataLoss


def report(live: LiveRun, tmp_path):
    settings = SimpleNamespace(work_dir=tmp_path / "work", checkpoint_dir=tmp_path)
    return live.report(SimpleNamespace(statuses=lambda: []), CommandBook(), settings)


def test_the_report_says_why_the_run_waits_and_then_that_it_does_not(tmp_path):
    live = LiveRun(expected_queries=1)
    live.waiting_for = "Kafka topic 'trades' does not exist"
    assert report(live, tmp_path).waiting_for == "Kafka topic 'trades' does not exist"
    live.waiting_for = ""
    assert report(live, tmp_path).waiting_for == ""


def test_a_kafka_querys_losses_are_counted_once_each_from_its_file(tmp_path):
    recorded = kafka_losses.losses_file(tmp_path / "sources" / "enrich")
    live = LiveRun(expected_queries=2, data_losses={"enrich": recorded})
    live.tracker.started("enrich")
    live.tracker.started("from_log")
    assert [q.data_losses for q in report(live, tmp_path).queries] == [0, 0]        # no file yet
    kafka_losses.record(recorded, [DataLoss("trades", 0, 5, 8, 20), DataLoss("trades", 1, 0, None, None)])
    kafka_losses.record(recorded, [DataLoss("trades", 0, 5, 8, 20)])                # the batch planned again
    with recorded.open("a") as torn:
        torn.write(json.dumps({"topic": "trades", "partition": 2})[:20])            # a crash mid-append
    assert report(live, tmp_path).queries == (QueryProgress("enrich", data_losses=2), QueryProgress("from_log"))
