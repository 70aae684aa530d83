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
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from sparkpoint.devstack import REPO
from sparkpoint.eventlog import EventLog
from sparkpoint.producer import trades
from tests.chaos.windows_check import compared
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


def results(database: str, written: list[dict]) -> dict:
    """The three tables against the trades written, as the chaos scenario
    compares them (``windows_check.compared``: the bars of every window the
    last trade closed, each once and exact; every sliding volume; every trade
    joined once with its sector)."""
    queries = {"bars": "SELECT sym, extract(epoch FROM window_start)::float8, open, high, low, close, volume, "
                       "trades, notional FROM bars_1m",
               "volumes": "SELECT sym, extract(epoch FROM window_start)::float8, volume, trades FROM volume_5m",
               "joined": "SELECT id, sym, sector FROM trades_by_sector"}
    tables = {}
    with psycopg.connect(database) as conn:
        for name, query in queries.items():
            try:
                with conn.transaction():
                    tables[name] = [tuple(row) for row in conn.execute(query)]
            except psycopg.errors.UndefinedTable:
                tables[name] = []
        vwaps = list(conn.execute("SELECT vwap, notional / volume FROM bars_1m")) if tables["bars"] else []
    return {**compared(written, tables["bars"], tables["volumes"], tables["joined"], SECTORS),
            "vwaps": vwaps}


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
    final = wait_until(lambda: alive(stack) and caught_up(stack, log, QUERIES)
                       and all_published(get_json(stack.config.status_url, stack.config.api_token))
                       and (r := results(database, written))["bars_due"] and not r["bars_missing"] and r,
                       timeout_s=420, what="the worker to read the log and emit every bar the last trade closed")
    assert final["late"] == len(written) - len(on_time) - 1 > 0      # the closing trade is on time
    for problem in ("bars_twice", "bars_early", "bars_unknown", "bars_wrong", "volumes_wrong", "joined_twice",
                    "joined_unknown", "joined_wrong"):
        assert final[problem] == [], f"{problem}: {final[problem]}"
    assert final["joined_missing"] == 0
    for vwap, computed in final["vwaps"]:
        assert vwap == pytest.approx(computed, rel=1e-9)
