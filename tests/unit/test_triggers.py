"""Each query's trigger interval: chosen by how its sink publishes."""

from __future__ import annotations

from worker import api as sp
from worker.runtime.queries import checkpoint_phase_ms, trigger_interval_ms
from worker.settings import WorkerSettings

SCHEMA = "id long, sym string, size long"


def test_sinks_published_as_batches_come_trigger_at_their_own_interval():
    trades = sp.read.from_log("trades", schema=SCHEMA, name="trades")
    pipeline = sp.Pipeline.of(
        trades | sp.write.to_files("out", name="files_out"),
        trades | sp.write.to_postgres("t", name="pg_out"),
        trades | sp.aggregate("sym", {"n": "count(1)"}, name="counts")
        | sp.write.to_postgres("c", key="sym", version="n", name="upsert_out"),
        trades | sp.write.to_console(name="console_out"))
    settings = WorkerSettings.from_env({"SP_TRIGGER_INTERVAL": "1500", "SP_UPSERT_TRIGGER_INTERVAL": "300"})
    assert {branch.sink.name: trigger_interval_ms(branch, settings) for branch in pipeline.branches} == {
        "files_out": 1500, "pg_out": 1500, "upsert_out": 300, "console_out": 300}


def test_checkpoints_fall_after_the_transactional_triggers_not_on_them():
    settings = WorkerSettings.from_env({"SP_TRIGGER_INTERVAL": "1500"})
    assert 0 < checkpoint_phase_ms(settings) < 1500
