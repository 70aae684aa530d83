"""The event-time example pipeline (``pipelines/trades_windows.py``) with real
processes and a real server (issue 39): the worker SIGKILLs itself inside a
window's emission (the bars' PostgreSQL transaction written, not committed),
is restarted, SIGKILLed again at a random point and restarted. The final
one-minute bars equal a batch computation over the on-time trades exactly,
each once; the upserted sliding volumes too; late trades are in neither.
Every trade, late ones too, is in the table joined with its sector, once.

The trades are written beforehand, their event times ten a second, each up
to 4 s out of order (within the 10 s lateness: never late), and one in fifty
of the last third 400 s late. A window drops a trade as late when the
watermark has passed the window's end (Spark's rule, and Flink's); the
watermark a batch runs with lags a trade's due time by 10 s plus up to two
batches (300 trades, 30 s of event time, each): once a restarted query runs
on its last batch's watermark, not yet on the event times it saw. 400 s late,
a trade's every window (five minutes at most) ends before the watermark:
it is in none. One partition: batches take the trades in the order written."""

from __future__ import annotations

import os
import random
from collections import defaultdict
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from sparkpoint.devstack import REPO
from sparkpoint.eventlog import EventLog
from sparkpoint.producer import trades
from tests.integration.pg_pipeline import SETTINGS, sink, worker
from tests.support import SECTORS, alive, all_published, caught_up, get_json, killed_by_fault, wait_until

pytestmark = pytest.mark.integration

PIPELINE = REPO / "pipelines" / "trades_windows.py"
QUERIES = {"bars_pg", "volume_pg", "sectors_pg"}

EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
EVENTS = 6000
LATE_S = 400


def stamp(second: float) -> str:
    return (EPOCH + timedelta(seconds=second)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def second_of(event: dict) -> float:
    return round((datetime.fromisoformat(event["time"].replace("Z", "+00:00")) - EPOCH).total_seconds(), 3)


def disordered_trades(seed: int) -> tuple[list[dict], list[dict]]:
    """The trades to write (ending with one an hour later, which closes every
    window before it) and those on time."""
    rng = random.Random(seed)
    written, on_time = [], []
    for i, trade in zip(range(EVENTS), trades(seed)):
        late = i >= 4000 and i % 50 == 0
        trade["time"] = stamp(round(i / 10 - (LATE_S if late else rng.uniform(0, 4)), 3))
        written.append(trade)
        if not late:
            on_time.append(trade)
    closing = dict(written[-1], id=EVENTS, sym="CLOSE", time=stamp(EVENTS / 10 + 3600))
    return written + [closing], on_time


def minute(event: dict) -> datetime:
    second = second_of(event)
    return EPOCH + timedelta(seconds=second - second % 60)


def expected_bars(events: list[dict]) -> dict[tuple, tuple]:
    """(sym, window start) -> (open, high, low, close, volume, trades, notional), in one batch."""
    windows: dict[tuple, list[dict]] = defaultdict(list)
    for event in events:
        windows[(event["sym"], minute(event))].append(event)
    bars = {}
    for key, mine in windows.items():
        ordered = sorted(mine, key=lambda e: (second_of(e), e["id"]))
        prices = [e["price"] for e in mine]
        bars[key] = (ordered[0]["price"], max(prices), min(prices), ordered[-1]["price"],
                     sum(e["size"] for e in mine), len(mine), sum(e["price"] * e["size"] for e in mine))
    return bars


def expected_volumes(events: list[dict]) -> dict[tuple, tuple[int, int]]:
    """(sym, window start) -> (volume, trades): five-minute windows every minute."""
    out: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    for event in events:
        first = minute(event)
        for start in (first - timedelta(minutes=back) for back in range(5)):
            out[(event["sym"], start)][0] += event["size"]
            out[(event["sym"], start)][1] += 1
    return {key: tuple(value) for key, value in out.items()}


def utc(row_time: datetime) -> datetime:
    return row_time.replace(tzinfo=timezone.utc) if row_time.tzinfo is None else row_time


def bars_in(database: str) -> list[tuple]:
    with psycopg.connect(database) as conn:
        try:
            return list(conn.execute("SELECT sym, window_start, open, high, low, close, volume, trades, notional, vwap "
                                     "FROM bars_1m"))
        except psycopg.errors.UndefinedTable:
            return []


def test_a_worker_killed_inside_a_window_emission_and_at_random_points_emits_every_bar_once_and_exactly(
        make_stack, database):
    seed = int(os.environ.get("SP_TEST_SEED", random.randrange(1 << 30)))
    print(f"kill schedule seed: SP_TEST_SEED={seed}")
    stack = make_stack(workers=1, pipeline=PIPELINE, SP_PG_DSN=database, **SETTINGS)
    log = EventLog.create(stack.config.log_dir / "trades", 1)
    written, on_time = disordered_trades(seed)
    log.append(0, written)
    with psycopg.connect(database, autocommit=True) as conn:       # the example's reference table
        conn.execute((REPO / "pipelines" / "symbols.sql").read_text())
    stack.start_controller()

    # 1. The worker SIGKILLs itself inside its 3rd emission of bars: written
    #    in the publish's transaction, not committed.
    stack.start_worker(0, SP_TEST_FAULT="publish.postgres_written@bars_pg:3")
    wait_until(lambda: killed_by_fault(stack, "publish.postgres_written@bars_pg"), timeout_s=420,
               what="the fault sentinel to kill the worker inside a bars publish")

    # 2. Restarted, it is SIGKILLed again once it has published a few more batches of bars.
    stack.start_worker(0)
    more = random.Random(seed).randint(1, 4)

    def bars_sink(after: int) -> dict | None:
        current = worker(get_json(stack.config.status_url, stack.config.api_token))
        return sink(current, "bars_pg") if current and current["registrations"] > after and current["sinks"] \
            else None
    first = wait_until(lambda: alive(stack) and (s := bars_sink(1)) and s["published_batch_id"] >= 0 and s,
                       timeout_s=420, what="the restarted worker to publish bars")
    wait_until(lambda: alive(stack) and bars_sink(1)["published_batch_id"] >= first["published_batch_id"] + more,
               timeout_s=420, what=f"{more} more batches of bars published")
    killed = worker(get_json(stack.config.status_url, stack.config.api_token))
    print(f"killing the worker at {killed['sinks']}")
    stack.kill("worker-0")

    # 3. Restarted again, it reads the whole log and emits every window the last trade closed.
    stack.start_worker(0)
    expected = expected_bars(on_time)
    wait_until(lambda: alive(stack) and caught_up(stack, log, QUERIES)
               and all_published(get_json(stack.config.status_url, stack.config.api_token))
               and len(bars_in(database)) >= len(expected),
               timeout_s=420, what=f"the worker to read the log and emit {len(expected)} bars")

    rows = bars_in(database)
    keys = [(sym, utc(start)) for sym, start, *_ in rows]
    assert len(keys) == len(set(keys)), f"{len(keys) - len(set(keys))} bars emitted twice"
    assert set(keys) == set(expected), "bars missing or unexpected (a late trade's window?)"
    for sym, start, open_, high, low, close, volume, count, notional, vwap in rows:
        want = expected[(sym, utc(start))]
        assert (open_, high, low, close, volume, count) == want[:6], (sym, start)
        assert notional == pytest.approx(want[6], rel=1e-9) and vwap == pytest.approx(want[6] / volume, rel=1e-9)

    with psycopg.connect(database) as conn:
        volumes = {(sym, utc(start)): (volume, count) for sym, start, volume, count in conn.execute(
            "SELECT sym, window_start, volume, trades FROM volume_5m WHERE sym <> 'CLOSE'")}
    assert volumes == expected_volumes(on_time)

    with psycopg.connect(database) as conn:
        joined = list(conn.execute("SELECT id, sym, sector FROM trades_by_sector"))
    assert len(joined) == len({row[0] for row in joined}), "trades joined twice"
    assert {row[0]: (row[1], row[2]) for row in joined} == {e["id"]: (e["sym"], SECTORS.get(e["sym"]))
                                                            for e in written}
