"""A standby's rehearsal (worker/runtime/rehearsal.py): when its first round ends, and what its restart runs again."""

import threading

from sparkpoint.eventlog import EventLog
from worker import api as sp
from worker.api.graph import Pipeline
from worker.runtime import rehearsal
from worker.runtime.rehearsal import BATCHES, RECORDS, rehearsed, uncommit_last
from worker.settings import WorkerSettings


def test_a_query_rehearses_its_batches_or_to_the_end_of_the_log():
    assert not rehearsed(None)                                                  # no batch yet
    assert not rehearsed({"batchId": BATCHES - 2, "numInputRows": RECORDS})    # full batches to go
    assert rehearsed({"batchId": BATCHES - 1, "numInputRows": RECORDS})
    assert rehearsed({"batchId": 0, "numInputRows": RECORDS - 1})               # the log has no more


def spark_checkpoint(root, offsets, commits):
    for directory, batches in (("offsets", offsets), ("commits", commits)):
        (root / directory).mkdir(parents=True)
        for batch in batches:
            (root / directory / str(batch)).write_text("v1\n")
    return root


def test_a_restarted_rehearsal_runs_its_last_committed_batch_again(tmp_path):
    query = spark_checkpoint(tmp_path / "q", offsets=[0, 1, 2], commits=[0, 1, 2])
    uncommit_last(query)
    assert sorted(p.name for p in (query / "commits").iterdir()) == ["0", "1"]
    assert sorted(p.name for p in (query / "offsets").iterdir()) == ["0", "1", "2"]


def test_a_rehearsal_stopped_mid_batch_keeps_its_commits(tmp_path):
    # Batch 3 was planned but not committed: started again, Spark runs it again.
    query = spark_checkpoint(tmp_path / "q", offsets=[0, 1, 2, 3], commits=[0, 1, 2])
    uncommit_last(query)
    assert sorted(p.name for p in (query / "commits").iterdir()) == ["0", "1", "2"]


def test_a_rehearsal_that_committed_nothing_has_nothing_to_remove(tmp_path):
    uncommit_last(tmp_path / "never-started")
    uncommit_last(spark_checkpoint(tmp_path / "q", offsets=[0], commits=[]))
    assert not list((tmp_path / "q" / "commits").iterdir())


class FakeQuery:
    """A rehearsal query that commits one full batch as it starts (the
    round's ``BATCHES``-th), or runs again the one its checkpoint lacks a
    commit for."""

    def __init__(self, directory, runs):
        self.name = directory.name
        self.isActive = True
        rerun = (directory / "offsets").is_dir() and not (directory / "commits" / "4").exists()
        runs.append((self.name, "restart, batch 4 again" if rerun else "first round"))
        for log in ("offsets", "commits"):
            (directory / log).mkdir(parents=True, exist_ok=True)
            (directory / log / "4").write_text("v1\n")
        self.lastProgress = {"batchId": BATCHES - 1, "numInputRows": RECORDS}

    def exception(self):
        return None

    def stop(self):
        self.isActive = False


def rehearsal_of(tmp_path, monkeypatch, on_start=lambda: None):
    """``rehearse`` of a two-query pipeline on a real log (an upsert sink never shares the files sink's
    query), its queries faked; the runs it started."""
    EventLog.create(tmp_path / "log" / "trades", 2)
    trades = sp.read.from_log("trades", schema="id long", name="trades")
    pipeline = Pipeline.of(trades | sp.write.to_files("a", name="a_out"),
                           trades | sp.write.to_postgres("b", key="id", version="seq", name="b_out"))
    settings = WorkerSettings.model_construct(log_dir=tmp_path / "log", test_fault="", trigger_interval_ms=1000,
                                              upsert_trigger_interval_ms=500)
    runs = []

    def start_query(spark, query, settings, query_root, staging, cap):
        assert cap == RECORDS and settings.trigger_interval_ms == 0 and all(s.name in staging for s in query.sinks)
        on_start()
        return FakeQuery(query_root / query.name, runs)

    monkeypatch.setattr(rehearsal, "start_query", start_query)
    return pipeline, settings, runs


def test_a_rehearsal_runs_each_query_then_its_restart_from_its_own_checkpoint(tmp_path, monkeypatch):
    pipeline, settings, runs = rehearsal_of(tmp_path, monkeypatch)
    rehearsal.rehearse(None, pipeline, settings, tmp_path / "scratch", threading.Event())
    assert runs == [("a_out", "first round"), ("b_out", "first round"),
                    ("a_out", "restart, batch 4 again"), ("b_out", "restart, batch 4 again")]
    assert not (tmp_path / "scratch").exists()


def test_a_standby_stopped_in_the_first_round_starts_no_restart(tmp_path, monkeypatch):
    stop = threading.Event()
    pipeline, settings, runs = rehearsal_of(tmp_path, monkeypatch, on_start=stop.set)
    rehearsal.rehearse(None, pipeline, settings, tmp_path / "scratch", stop)
    assert runs == [("a_out", "first round"), ("b_out", "first round")]
