"""Event time: watermarks, windows and deduplication within a watermark.

Spark's own operators (``withWatermark``, ``window``, ``session_window``,
``dropDuplicatesWithinWatermark``) do the work; this module only declares
them as named nodes of the graph and checks what can be checked before
Spark runs (durations, emit modes). Checks that need the data's types (a
window's column is a timestamp) run when the worker analyses the pipeline
at start-up (``worker.runtime.queries.apply_node``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from worker.api.graph import Node, Operator, PipelineError

# Spark's interval strings as a user writes them: "10 seconds", "1 minute", "1 hour 30 minutes".
_UNIT = r"(?:millisecond|second|minute|hour|day|week)s?"
DURATION = re.compile(rf"^\d+\s+{_UNIT}(?:\s+\d+\s+{_UNIT})*$")

WINDOW_EMITS = ("final", "updates")


def check_duration(label: str, what: str, value: Any) -> str:
    """``value`` as Spark's interval string, or a ``PipelineError`` naming ``label``."""
    if not isinstance(value, str) or not DURATION.match(value.strip()):
        raise PipelineError(f"{label}: {what} is a duration such as '10 seconds' or '1 minute' "
                            f"(units: milliseconds to weeks), got {value!r}")
    return " ".join(value.split())


def watermark_params(label: str, column: Any, lateness: Any) -> dict[str, str]:
    """A watermark's parameters, checked: its event-time column and how late a record may be."""
    if not isinstance(column, str) or not column:
        raise PipelineError(f"{label}: the watermark is an event-time column's name, got {column!r}")
    return {"watermark": column, "lateness": check_duration(label, "lateness", lateness)}


def watermark(column: str, lateness: str, *, name: str | None = None) -> Operator:
    """Declare ``column`` (a timestamp) the stream's event time: records
    more than ``lateness`` behind the latest event time seen are late.
    Windows and ``deduplicate(within_watermark=True)`` after it drop late
    records (counted per node in ``/metrics`` and on the status page) and
    forget state the watermark has passed.

    Sources take the same as ``watermark=`` and ``lateness=``; use this node
    for a column a ``map`` derives.
    """
    return Operator(Node("watermark", watermark_params("sp.watermark()", column, lateness), name))


def window(time: str, size: str, aggregations: Mapping[str, str], *, by: str | list[str] = (),
           slide: str | None = None, emit: str = "final", name: str | None = None) -> Operator:
    """Event-time windows of ``size`` over the timestamp column ``time``:
    tumbling, or sliding every ``slide``; per window and ``by`` key, the
    ``aggregations`` (as ``sp.aggregate`` takes them). Each output row has
    ``window_start``, ``window_end``, the ``by`` columns and the aggregations.
    Stateful: name it.

    ``emit``:

    - ``"final"``: each window once, when the watermark passes its end
      (Spark's append mode). Needs a watermark on ``time``. For every sink:
      transactional sinks (files, PostgreSQL, Kafka) get each window exactly
      once, across crashes.
    - ``"updates"``: each batch, the windows it changed, with their new
      aggregates (update mode): for sinks that take updates, an upsert keyed
      by the ``by`` columns and ``window_start`` (Kafka and the console pass
      each change on). With a watermark, state of windows it passed is dropped.
    """
    return Operator(Node("window", _window_params("sp.window()", time, aggregations, by, emit,
                                                  size=check_duration("sp.window()", "size", size),
                                                  **({} if slide is None else {
                                                      "slide": check_duration("sp.window()", "slide", slide)})),
                         name))


def session_window(time: str, gap: str, aggregations: Mapping[str, str], *, by: str | list[str] = (),
                   emit: str = "final", name: str | None = None) -> Operator:
    """Session windows over the timestamp column ``time``: a key's window
    closes after ``gap`` without its events (Spark's ``session_window``).
    Output and ``emit`` as for ``window``, except that Spark emits session
    windows only ``"final"``."""
    if emit != "final":
        raise PipelineError(f"sp.session_window(emit={emit!r}): a session window is emitted only 'final' (Spark "
                            "cannot update a session in place: two sessions may merge into one)")
    return Operator(Node("window", _window_params("sp.session_window()", time, aggregations, by, emit,
                                                  gap=check_duration("sp.session_window()", "gap", gap)), name))


def _window_params(label: str, time: str, aggregations: Mapping[str, str], by: str | list[str], emit: str,
                   **spec: str) -> dict[str, Any]:
    if not isinstance(time, str) or not time:
        raise PipelineError(f"{label}: time is the event-time column's name, got {time!r}")
    if not aggregations:
        raise PipelineError(f"{label}: needs at least one aggregation, e.g. {{'volume': 'sum(size)'}}")
    if emit not in WINDOW_EMITS:
        raise PipelineError(f"{label}: emit is 'final' (each window once, when the watermark passes its end) or "
                            f"'updates' (the windows each batch changed), got {emit!r}")
    keys = [by] if isinstance(by, str) else list(by)
    return {"time": time, **spec, "by": keys, "aggregations": dict(aggregations), "emit": emit}
