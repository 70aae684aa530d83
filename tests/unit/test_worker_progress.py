"""Worker-side bookkeeping without Spark: ProgressTracker fed with
StreamingQueryProgress-shaped dicts, error summaries, worker_state, Backoff."""

from __future__ import annotations

import json
import logging

import pytest

from sparkpoint.backoff import Backoff
from sparkpoint.messages import QueryProgress, WorkerState
from worker.lifecycle.live import worker_state
from worker.runtime.progress import ProgressTracker, merge_offsets, summarize_error

_JVM_FRAMES = "".join(
    f"\tat org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution.runBatch{i}"
    f"(MicroBatchExecution.scala:{1000 + i})\n" for i in range(200))

_PYTHON_TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/venv/lib/python3.11/site-packages/pyspark/python/lib/pyspark.zip/pyspark/worker.py", '
    "line 4207, in invoke_udf\n"
    "    func, profiler, deserializer, serializer = read_udfs(\n"
    "                                               ^^^^^^^^^^\n"
    '  File "/work/pipelines/trades.py", line 14, in enrich\n'
    "    return size / 0\n"
    "ZeroDivisionError: division by zero\n"
)

# str(StreamingQuery.exception()): what worker.main passes to on_terminated.
QUERY_EXCEPTION_TEXT = (
    "[PYTHON_EXCEPTION] An exception was thrown from the Python worker: " + _PYTHON_TRACEBACK
    + " SQLSTATE: 38000\n=== Streaming Query ===\n"
    "Identifier: vwap_out [id = 4fe05db2-2839-448e-9985-37bfa6a50843, runId = 913ea145-0f0b]\n"
    "Current State: ACTIVE\nThread State: RUNNABLE\n"
)

# QueryTerminatedEvent.exception: what SparkProgressListener passes to on_terminated
# (the JVM's exception string; shape captured from a real PySpark 4.3 query).
LISTENER_EXCEPTION_TEXT = (
    "org.apache.spark.api.python.PythonException: [PYTHON_EXCEPTION] An exception was thrown from the "
    "Python worker: " + _PYTHON_TRACEBACK + " SQLSTATE: 38000\n" + _JVM_FRAMES
)


def progress(batch_id, rows, *, name="out", end_offset=None, rps=12.5) -> dict:
    event = {"id": "9c1d", "runId": "77aa", "name": name, "batchId": batch_id, "numInputRows": rows,
             "inputRowsPerSecond": 3.0, "processedRowsPerSecond": rps, "sources": []}
    if end_offset is not None:
        event["sources"] = [{"description": "LogSource", "startOffset": None, "endOffset": end_offset,
                             "numInputRows": rows}]
    return event


# --- ProgressTracker -------------------------------------------------------------

def test_rows_accumulate_per_new_batch():
    tracker = ProgressTracker()
    tracker.started("out")
    assert tracker.snapshot() == [QueryProgress("out")]
    tracker.on_progress(progress(0, 10, end_offset='{"0": 100, "1": 40}'))
    tracker.on_progress(progress(1, 5, end_offset={"0": 150, "1": 40}, rps=99.0))
    [status] = tracker.snapshot()
    assert status.batch_id == 1
    assert status.rows_processed == 15
    assert status.offsets == {"0": 150, "1": 40}
    assert status.rows_per_second == 99.0
    assert status.active and status.error == ""


def test_the_sources_end_is_kept_beside_the_offsets():
    tracker = ProgressTracker()
    event = progress(0, 10, end_offset={"0": 100, "1": 40})
    event["sources"][0]["latestOffset"] = '{"0": 180, "1": 40}'
    tracker.on_progress(event)
    [status] = tracker.snapshot()
    assert (status.offsets, status.latest_offsets, status.lag_bytes) == ({"0": 100, "1": 40}, {"0": 180, "1": 40}, 80)
    tracker.on_progress(progress(1, 0, end_offset={"0": 150, "1": 40}))      # an event without it
    assert tracker.snapshot()[0].latest_offsets == {"0": 180, "1": 40}


def test_kafka_offsets_are_flat_by_topic_and_partition_and_their_lag_is_in_records():
    tracker = ProgressTracker()
    event = progress(0, 10, end_offset={"trades": {"0": 70, "1": 5}, "quotes": {"0": 3}})
    event["sources"][0]["latestOffset"] = '{"trades": {"0": 100, "1": 5, "2": 4}, "quotes": {"0": 3}}'
    tracker.on_progress(event)
    [status] = tracker.snapshot()
    assert status.offsets == {"trades:0": 70, "trades:1": 5, "quotes:0": 3}
    assert status.kafka_lag == {"quotes:0": 0, "trades:0": 30, "trades:1": 0, "trades:2": 4}
    assert status.lag_bytes == 0


def test_a_restored_query_stands_at_its_batch_until_the_next_one():
    tracker = ProgressTracker()
    tracker.restored("out", 4, {"0": 400})
    tracker.restored("done", 9, {"0": 900}, finished=True)
    tracker.started("out")                                  # Spark's start event changes nothing
    assert tracker.snapshot() == [QueryProgress("done", 9, {"0": 900}, active=False), QueryProgress("out", 4, {"0": 400})]
    tracker.on_progress(progress(5, 20, end_offset={"0": 480}))
    assert tracker.snapshot()[1] == QueryProgress("out", 5, {"0": 480}, rows_processed=20, rows_per_second=12.5)


def test_repeated_batch_id_does_not_double_count():
    tracker = ProgressTracker()
    tracker.on_progress(progress(0, 10, end_offset='{"0": 100}'))
    tracker.on_progress(progress(0, 10, end_offset='{"0": 100}'))
    assert tracker.snapshot()[0].rows_processed == 10


def test_late_batch_is_ignored():
    tracker = ProgressTracker()
    tracker.on_progress(progress(3, 10, end_offset='{"0": 300}'))
    tracker.on_progress(progress(2, 7, end_offset='{"0": 200}'))
    [status] = tracker.snapshot()
    assert (status.batch_id, status.rows_processed, status.offsets) == (3, 10, {"0": 300})


def test_progress_without_sources_keeps_offsets():
    tracker = ProgressTracker()
    tracker.on_progress(progress(0, 4, end_offset={"2": 64}))
    tracker.on_progress(progress(1, 0))
    assert tracker.snapshot()[0].offsets == {"2": 64}


def test_queries_are_tracked_separately_and_sorted():
    tracker = ProgressTracker()
    tracker.on_progress(progress(0, 4, name="vwap_out"))
    tracker.on_progress(progress(0, 6, name="enriched_out"))
    assert [(q.name, q.rows_processed) for q in tracker.snapshot()] == [("enriched_out", 6), ("vwap_out", 4)]


def test_merge_offsets():
    sources = [
        {"endOffset": '{"0": 10}'},
        {"endOffset": {"1": 20, "2": "not-a-number"}},
        {"endOffset": "not json"},
        {"endOffset": None},
        {},
    ]
    assert merge_offsets(sources) == {"0": 10, "1": 20}
    assert merge_offsets([]) == {}


# --- errors ------------------------------------------------------------------------

def test_on_terminated_with_query_exception_text():
    tracker = ProgressTracker()
    tracker.on_progress(progress(4, 10, end_offset='{"0": 10}'))
    tracker.on_terminated("out", QUERY_EXCEPTION_TEXT)
    [status] = tracker.snapshot()
    assert status.error == "ZeroDivisionError: division by zero"
    assert not status.active
    assert (status.batch_id, status.offsets) == (4, {"0": 10})


def test_on_terminated_with_listener_exception_text():
    tracker = ProgressTracker()
    tracker.on_terminated("out", LISTENER_EXCEPTION_TEXT)
    assert tracker.snapshot()[0].error == "ZeroDivisionError: division by zero"


def test_on_terminated_without_error():
    tracker = ProgressTracker()
    tracker.started("out")
    tracker.on_terminated("out", None)
    [status] = tracker.snapshot()
    assert not status.active and status.error == ""


def test_summarize_error_without_exception_line_and_limit():
    assert summarize_error("\n\n  something went wrong  \nmore\n") == "something went wrong"
    assert summarize_error("") == ""
    assert summarize_error("ValueError: " + "x" * 1000) == ("ValueError: " + "x" * 1000)[:500]
    assert len(summarize_error("ValueError: " + "x" * 1000, limit=40)) == 40


# --- worker_state --------------------------------------------------------------------

def q(name="a", batch_id=0, active=True, error=""):
    return QueryProgress(name, batch_id=batch_id, active=active, error=error)


@pytest.mark.parametrize("queries, expected, state", [
    ([], 2, WorkerState.STARTING),
    ([q("a")], 2, WorkerState.STARTING),                         # not every query started
    ([q("a"), q("b", batch_id=-1)], 2, WorkerState.STARTING),    # one without a batch yet
    ([q("a"), q("b", batch_id=3)], 2, WorkerState.RUNNING),
    ([q("a", active=False), q("b", active=False)], 2, WorkerState.FINISHED),
    ([q("a", active=False), q("b")], 2, WorkerState.RUNNING),
    ([q("a", error="ValueError: x"), q("b")], 2, WorkerState.FAILED),
    ([q("a", batch_id=-1, error="ValueError: x")], 2, WorkerState.FAILED),
])
def test_worker_state(queries, expected, state):
    assert worker_state(queries, expected) == state


@pytest.mark.parametrize("queries, state", [
    ([], WorkerState.STARTING),                                  # nothing started yet
    ([q("a", batch_id=-1), q("b", batch_id=-1)], WorkerState.RECOVERING),
    ([q("a"), q("b")], WorkerState.RECOVERING),                  # replaying: not running yet
    ([q("a", error="ValueError: x"), q("b")], WorkerState.FAILED),
    ([q("a", active=False), q("b", active=False)], WorkerState.FINISHED),
])
def test_worker_state_while_recovering(queries, state):
    assert worker_state(queries, 2, recovering=True) == state


# --- Backoff -------------------------------------------------------------------------

def test_backoff_doubles_up_to_the_cap_and_resets():
    backoff = Backoff()
    assert [backoff.next_delay() for _ in range(7)] == pytest.approx([0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0])
    backoff.reset()
    assert backoff.next_delay() == pytest.approx(0.2)


def test_backoff_custom():
    backoff = Backoff(initial_s=1.0, maximum_s=2.5, factor=3.0)
    assert [backoff.next_delay() for _ in range(3)] == pytest.approx([1.0, 2.5, 2.5])


def test_progress_event_round_trips_through_json():
    # The listener parses StreamingQueryProgress.json; the tracker sees plain dicts.
    tracker = ProgressTracker()
    tracker.on_progress(json.loads(json.dumps(progress(0, 3, end_offset='{"0": 30}'))))
    assert tracker.snapshot()[0].offsets == {"0": 30}


# --- SparkProgressListener ------------------------------------------------------------

def test_the_listener_ignores_a_restarted_runs_late_events():
    """A restart in the same Spark session: the earlier run's queries have the
    same names and ids (from the checkpoint); only their run ids differ."""
    from worker.runtime.progress import SparkProgressListener

    tracker = ProgressTracker()
    tracker.restored("out", 7, {"0": 100})
    listener = SparkProgressListener(tracker)
    listener.started("run-2", "out")

    def progress(run_id: str, batch_id: int) -> str:
        return json.dumps({"name": "out", "id": "q1", "runId": run_id, "batchId": batch_id, "numInputRows": 5,
                           "sources": []})

    listener.progressed(progress("run-1", 9))             # the earlier run's, late
    listener.terminated("run-1", "ValueError: boom")
    assert tracker.snapshot() == [QueryProgress("out", 7, {"0": 100})]
    listener.progressed(progress("run-2", 8))
    assert [(q.batch_id, q.rows_processed, q.error) for q in tracker.snapshot()] == [(8, 5, "")]
    listener.terminated("run-2", "ValueError: boom")
    assert tracker.snapshot()[0].error == "ValueError: boom"


def test_the_listener_logs_each_runs_first_batch_with_rows_once_and_says_so_once(caplog):
    from worker.runtime.progress import SparkProgressListener

    said: list[int] = []
    listener = SparkProgressListener(ProgressTracker(), on_first_rows=lambda: said.append(len(caplog.records)))
    listener.started("run-1", "out")

    def progress(batch_id: int, rows: int) -> str:
        return json.dumps({"name": "out", "id": "q1", "runId": "run-1", "batchId": batch_id, "numInputRows": rows,
                           "timestamp": f"2026-11-27T10:00:0{batch_id}.000Z", "sources": [],
                           "durationMs": {"addBatch": 40 * batch_id, "triggerExecution": 50 * batch_id}})

    with caplog.at_level(logging.INFO, logger="worker.runtime.progress"):
        for batch_id, rows in ((1, 0), (2, 7), (3, 9)):
            listener.progressed(progress(batch_id, rows))
    assert [r.getMessage() for r in caplog.records] == [
        'query out: first batch with rows of this run: batch 2, 7 rows, started 2026-11-27T10:00:02.000Z, '
        'took {"addBatch": 80, "triggerExecution": 100} ms']
    assert said == [1]      # once, after the batch with rows


def test_the_listener_says_when_one_of_its_queries_ended():
    from worker.runtime.progress import SparkProgressListener

    ended: list[str] = []
    listener = SparkProgressListener(ProgressTracker(), on_terminated=lambda: ended.append("ended"))
    listener.started("run-2", "out")
    listener.terminated("run-1", "ValueError: an earlier run's")
    assert ended == []
    listener.terminated("run-2", None)
    assert ended == ["ended"]
