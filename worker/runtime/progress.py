"""Per-query progress, fed by Spark's query listener and read by the reporter.

``ProgressTracker`` is plain, thread-safe bookkeeping (tested without Spark);
``SparkProgressListener`` adapts Spark's listener events to it.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from sparkpoint.messages import QueryProgress
from sparkpoint.offsets import flatten

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from worker.api.graph import Pipeline

log = logging.getLogger(__name__)

_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*(?:Error|Exception)[\w.]*): .+")


def summarize_error(text: str, limit: int = 500) -> str:
    """One readable line from a Spark failure: the Python exception if there is one."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    exceptions = [line for line in lines if _EXCEPTION_LINE.match(line)]
    # Spark wraps a Python failure in a JVM exception (org.apache..., java...);
    # the user's error is the Python one inside it.
    python = [line for line in exceptions if not line.startswith(("org.", "java.", "scala.", "py4j."))]
    summary = (python or exceptions or lines or [""])[0]
    return summary[:limit]


def merge_offsets(sources: list[dict], key: str = "endOffset") -> dict[str, int]:
    """Offsets of a progress event's sources, flat (``sparkpoint.offsets``):
    where each batch ended (``endOffset``), or the source's end when it was
    planned (``latestOffset``, from the source's ``reportLatestOffset``)."""
    offsets: dict[str, int] = {}
    for source in sources:
        end = source.get(key)
        if isinstance(end, str):
            try:
                end = json.loads(end)
            except ValueError:
                continue
        offsets.update(flatten(end))
    return offsets


def stateful_operators(pipeline: Pipeline) -> dict[str, tuple[str, ...]]:
    """Each query's stateful nodes in the order Spark lists their operators
    in a progress event (``stateOperators``): by operator id, which Spark
    numbers from the sink up (``QueryLayout.operator_ids``)."""
    return {query.name: tuple(node.name for node in reversed(query.stateful)) for query in pipeline.queries()}


def late_rows(progress: dict, operators: tuple[str, ...], before: dict[str, int]) -> dict[str, int]:
    """``before`` plus the rows each stateful operator of a progress event
    dropped behind the watermark, by node name (``operators``, in Spark's order)."""
    late = dict(before)
    for node, operator in zip(operators, progress.get("stateOperators") or []):
        late[node] = late.get(node, 0) + int(operator.get("numRowsDroppedByWatermark") or 0)
    return late


class ProgressTracker:
    def __init__(self, operators: Mapping[str, tuple[str, ...]] | None = None) -> None:
        """``operators``: each query's stateful nodes, as ``stateful_operators`` lists them."""
        self._lock = threading.Lock()
        self._queries: dict[str, QueryProgress] = {}
        self._operators = dict(operators or {})

    def started(self, name: str) -> None:
        with self._lock:
            self._queries.setdefault(name, QueryProgress(name))

    def on_progress(self, progress: dict) -> None:
        """One Spark progress event (``StreamingQueryProgress.json`` as a dict)."""
        name = progress.get("name") or progress.get("id", "?")
        with self._lock:
            current = self._queries.get(name, QueryProgress(name))
            batch_id = int(progress.get("batchId", -1))
            if batch_id < current.batch_id:
                return  # late event: never move backwards
            rows = int(progress.get("numInputRows", 0))
            new = batch_id != current.batch_id
            self._queries[name] = replace(
                current,
                batch_id=batch_id,
                offsets=merge_offsets(progress.get("sources", [])) or current.offsets,
                latest_offsets=merge_offsets(progress.get("sources", []), "latestOffset") or current.latest_offsets,
                rows_processed=current.rows_processed + (rows if new else 0),
                rows_per_second=float(progress.get("processedRowsPerSecond") or 0.0),
                late_rows=late_rows(progress, self._operators.get(name, ()), current.late_rows) if new
                else current.late_rows,
            )

    def restored(self, name: str, batch_id: int, offsets: dict[str, int], *, finished: bool = False) -> None:
        """A query restored at ``batch_id``: where it stands until its next
        batch (a query with nothing new to read may never report one);
        ``finished``: it stays finished, not started again."""
        with self._lock:
            self._queries[name] = QueryProgress(name, batch_id, dict(offsets), active=not finished)

    def on_terminated(self, name: str, error: str | None) -> None:
        with self._lock:
            current = self._queries.get(name, QueryProgress(name))
            self._queries[name] = replace(current, active=False, error=summarize_error(error or ""))

    def snapshot(self) -> list[QueryProgress]:
        with self._lock:
            return sorted(self._queries.values(), key=lambda q: q.name)


class SparkProgressListener:
    """Forwards Spark's query events to a tracker (on Spark's listener
    thread); ``on_batch`` is called after each batch (the publisher's
    wake-up), ``on_first_rows`` after a run's first batch with rows (the
    reporter's), ``on_terminated`` when one of its queries ends (the supervisor's).
    ``register`` subscribes it to a session's queries, ``unregister`` ends that.

    Only the query runs it saw start count: an earlier run in the same
    Spark session (a restart) may still deliver events late, under the same
    query names and ids (restored from the checkpoint); each start has a
    run id of its own."""

    def __init__(self, tracker: ProgressTracker, on_batch: Callable[[], None] = lambda: None,
                 on_terminated: Callable[[], None] = lambda: None,
                 on_first_rows: Callable[[], None] = lambda: None) -> None:
        self.tracker = tracker
        self.on_batch = on_batch
        self.on_first_rows = on_first_rows
        self.on_terminated = on_terminated
        # Spark names a terminated query only by its ids: remembered from its start.
        self._names_by_run: dict[str, str] = {}
        self._runs_with_rows: set[str] = set()     # runs whose first batch with rows was logged
        self._registered = None     # the Java listener, while registered

    def register(self, spark: SparkSession) -> None:
        from pyspark.java_gateway import ensure_callback_server_started

        gateway = spark.sparkContext._gateway
        ensure_callback_server_started(gateway)
        wrapper = gateway.jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper
        self._registered = wrapper(_EventBridge(self))
        spark._jsparkSession.streams().addListener(self._registered)

    def unregister(self, spark: SparkSession) -> None:
        if self._registered is not None:
            spark._jsparkSession.streams().removeListener(self._registered)
            self._registered = None

    def started(self, run_id: str, name: str | None) -> None:
        if name:
            self._names_by_run[run_id] = name
            self.tracker.started(name)

    def progressed(self, progress_json: str) -> None:
        """``progress_json``: ``StreamingQueryProgress.json``."""
        progress = json.loads(progress_json)
        run_id = str(progress.get("runId"))
        if run_id not in self._names_by_run:
            return
        self.tracker.on_progress(progress)
        if run_id not in self._runs_with_rows and int(progress.get("numInputRows") or 0) > 0:
            # Where a (re)started query's first real batch spends its time.
            self._runs_with_rows.add(run_id)
            log.info("query %s: first batch with rows of this run: batch %s, %s rows, started %s, took %s ms",
                     self._names_by_run[run_id], progress.get("batchId"), progress.get("numInputRows"),
                     progress.get("timestamp"), json.dumps(progress.get("durationMs", {}), sort_keys=True))
            self.on_first_rows()
        self.on_batch()

    def terminated(self, run_id: str, exception: str | None) -> None:
        name = self._names_by_run.get(run_id)
        if name is not None:
            self.tracker.on_terminated(name, exception)
            self.on_terminated()


class _EventBridge:
    """Spark's Java listener interface for Python, implemented over py4j:
    Java events become plain strings here, at the edge. (PySpark's own bridge
    converts each progress event field by field, and each Java map it
    iterates ends in an exception it classifies by a dozen class lookups
    over Spark's jars: a third of a worker JVM's CPU at 100 events/s.)"""

    def __init__(self, listener: SparkProgressListener) -> None:
        self.listener = listener

    def onQueryStarted(self, jevent) -> None:  # noqa: N802 - Spark's names
        self.listener.started(jevent.runId().toString(), jevent.name())

    def onQueryProgress(self, jevent) -> None:  # noqa: N802
        self.listener.progressed(jevent.progress().json())

    def onQueryIdle(self, jevent) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, jevent) -> None:  # noqa: N802
        exception = jevent.exception()
        self.listener.terminated(jevent.runId().toString(), exception.get() if exception.isDefined() else None)

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]
