"""Event-time windows, watermarks and deduplication within a watermark on
real Spark (issue 39): each query is built as the worker builds it
(``queries.query_frame``) over an event log fed in batches, out of order;
its output is compared with a computation in plain Python over the same
events."""

from __future__ import annotations

import random
import re
from collections import defaultdict
from datetime import datetime, timezone

import pytest

from tests.integration.queries import EPOCH, SCHEMA, event
from worker import api as sp

pytestmark = pytest.mark.integration

LATENESS_S = 20
SYMBOLS = ("AAPL", "MSFT", "IBM")


def disordered(count: int, seed: int) -> list[dict]:
    """Events about one a second, each up to LATENESS_S / 2 seconds out of order: none is late."""
    rng = random.Random(seed)
    return [event(i, rng.choice(SYMBOLS), rng.randint(1, 100), max(0.0, i + rng.uniform(-LATENESS_S / 2, 0)))
            for i in range(count)]


def source() -> sp.Stream:
    return sp.read.from_log("trades", schema=SCHEMA, name="trades", watermark="time", lateness=f"{LATENESS_S} seconds")


def seconds(stamp: datetime) -> float:
    return (stamp.replace(tzinfo=timezone.utc) - EPOCH).total_seconds()


def event_second(e: dict) -> float:
    return (datetime.fromisoformat(e["time"].replace("Z", "+00:00")) - EPOCH).total_seconds()


def ms(second: float) -> float:
    """A time in seconds as Spark holds it: to the millisecond the events have (no float error)."""
    return round(second, 3)


def fixed_windows(events: list[dict], size: int, slide: int) -> dict[tuple, tuple[int, int]]:
    """(sym, start, end) -> (trades, volume), windows of ``size`` seconds every ``slide``."""
    out: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    for e in events:
        t = event_second(e)
        start = (t // slide) * slide
        while start > t - size:
            out[(e["sym"], start, start + size)][0] += 1
            out[(e["sym"], start, start + size)][1] += e["size"]
            start -= slide
    return {(sym, ms(start), ms(end)): tuple(v) for (sym, start, end), v in out.items()}


def sessions(events: list[dict], gap: int) -> dict[tuple, tuple[int, int]]:
    """(sym, start, end) -> (trades, volume): a key's session ends ``gap`` after its last event."""
    out = {}
    by_sym: dict[str, list[dict]] = defaultdict(list)
    for e in events:
        by_sym[e["sym"]].append(e)
    for sym, mine in by_sym.items():
        mine.sort(key=event_second)
        current: list[dict] = []
        for e in mine + [None]:
            if current and (e is None or event_second(e) >= event_second(current[-1]) + gap):
                start, end = event_second(current[0]), event_second(current[-1]) + gap
                out[(sym, ms(start), ms(end))] = (len(current), sum(c["size"] for c in current))
                current = []
            if e is not None:
                current.append(e)
    return out


def emitted(rows: list[dict]) -> dict[tuple, tuple[int, int]]:
    keys = [(r["sym"], ms(seconds(r["window_start"])), ms(seconds(r["window_end"]))) for r in rows]
    assert len(keys) == len(set(keys)), "a final window was emitted twice"
    return {key: (r["trades"], r["volume"]) for key, r in zip(keys, rows)}


AGGREGATIONS = {"trades": "count(1)", "volume": "sum(size)"}


def flush(after: list[dict], gap_s: int = 3600) -> list[dict]:
    """An event far past ``after``: the watermark passes every window they opened."""
    return [event(10**6, "FLUSH", 0, max(map(event_second, after)) + gap_s)]


@pytest.mark.parametrize("make, expected", [
    (lambda: sp.window("time", "10 seconds", AGGREGATIONS, by="sym", name="tumbling"),
     lambda events: fixed_windows(events, 10, 10)),
    (lambda: sp.window("time", "30 seconds", AGGREGATIONS, by="sym", slide="10 seconds", name="sliding"),
     lambda events: fixed_windows(events, 30, 10)),
    (lambda: sp.session_window("time", "3 seconds", AGGREGATIONS, by="sym", name="sessions"),
     lambda events: sessions(events, 3)),
], ids=["tumbling", "sliding", "session"])
def test_final_windows_over_out_of_order_events_equal_a_batch_computation(run, make, expected):
    events = disordered(300, seed=39)
    query = run(source() | make())
    for start in range(0, len(events), 60):
        query.feed(events[start:start + 60])
    query.feed(flush(events))
    assert emitted([r for r in query.rows if r["sym"] != "FLUSH"]) == expected(events)
    assert sum(query.late.values()) == 0


def test_late_events_are_dropped_counted_and_leave_each_final_window_emitted_once(run):
    query = run(source() | sp.window("time", "10 seconds", AGGREGATIONS, by="sym", name="bars"))
    on_time = [event(i, "AAPL", 1, i) for i in range(60)]
    query.feed(on_time)                                     # the watermark moves to 59 - 20 = 39 s
    query.feed([event(100, "AAPL", 1, 45)])                 # one batch more: windows to 30 s are emitted
    closed = emitted(query.rows)
    assert closed == fixed_windows([e for e in on_time if event_second(e) < 30], 10, 10)
    # Late: behind the watermark, into emitted windows and into one never opened (IBM's).
    # One per key and window: Spark counts a window's late rows after partial aggregation.
    late = [event(200, "AAPL", 500, 5), event(201, "AAPL", 500, 15), event(202, "IBM", 500, 25)]
    query.feed(late)
    query.feed(flush(on_time))
    rows = emitted(query.rows)                              # still each window once
    assert {key: value for key, value in rows.items() if key in closed} == closed
    assert not any(sym == "IBM" for sym, _, _ in rows)
    assert rows == {**fixed_windows(on_time + [event(100, "AAPL", 1, 45)], 10, 10),
                    **{k: v for k, v in rows.items() if k[0] == "FLUSH"}}
    assert query.late == {"bars": 3}


def test_updating_windows_emit_the_windows_each_batch_changed(run):
    query = run(source() | sp.window("time", "10 seconds", AGGREGATIONS, by="sym", emit="updates", name="volume"))
    first = query.feed([event(0, "AAPL", 5, 1), event(1, "IBM", 7, 2)])
    second = query.feed([event(2, "AAPL", 3, 4)])           # only AAPL's window changed
    assert sorted((r["sym"], r["trades"], r["volume"]) for r in first) == [("AAPL", 1, 5), ("IBM", 1, 7)]
    assert [(r["sym"], r["trades"], r["volume"]) for r in second] == [("AAPL", 2, 8)]


def test_deduplication_within_the_watermark_drops_duplicates_and_its_state_stops_growing(run):
    query = run(source() | sp.deduplicate("id", within_watermark=True, name="dedup"))
    delivered: list[dict] = []
    states: list[int] = []
    for second in range(0, 600, 20):
        batch = [event(second + i, "AAPL", 1, second + i) for i in range(20)]
        again = [dict(e) for e in batch[:5]]                # delivered twice, within the lateness
        query.feed(batch + again)
        delivered += batch
        states.append(query.query.lastProgress["stateOperators"][0]["numRowsTotal"])
    assert sorted(r["id"] for r in query.rows) == sorted(e["id"] for e in delivered)
    # The state holds the keys of the last lateness-and-a-batch, not all 600.
    assert max(states[5:]) <= 2 * LATENESS_S + 20 < len(delivered)
    assert states[-1] <= states[5] + 20


@pytest.mark.parametrize("stream, needle", [
    (lambda: sp.read.from_log("trades", schema="id long, sym string, time string", name="trades",
                              watermark="time", lateness="5 seconds"),
     "node 'trades': its watermark column 'time' is string, not a timestamp"),
    (lambda: source() | sp.window("stamp", "1 minute", AGGREGATIONS, emit="updates", name="bars"),
     "node 'bars': its window's time column 'stamp' is not among the columns"),
])
def test_an_event_time_column_that_is_missing_or_not_a_timestamp_is_refused_naming_the_node(spark, stream, needle):
    from worker.stateplan.derive import stateful_schemas

    pipeline = sp.Pipeline.of(stream() | sp.write.to_console(name="out"))
    with pytest.raises(sp.PipelineError, match=re.escape(needle)):
        stateful_schemas(pipeline, spark)
