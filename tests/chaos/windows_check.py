"""The windows scenario's check (``pipelines/trades_windows.py`` on the
compose stack): ``compared`` runs inside a container of the project's image
(``ComposeStack.windows_results`` sends its source along) over the event log
and the PostgreSQL tables, and returns a short summary; the test asserts on
it."""

from __future__ import annotations


def compared(events: list[dict], bars: list[tuple], volumes: list[tuple], joined: list[tuple],
             sectors: dict[str, str], lateness_s: float = 10.0) -> dict:
    """``events``: the log's trades; ``bars`` (sym, window_start, open, high,
    low, close, volume, trades, notional), ``volumes`` (sym, window_start,
    volume, trades), ``joined`` (id, sector): the tables' rows, window starts
    in seconds since the epoch.

    A trade the producer stamped late (``SP_PRODUCER_LATE_FRACTION``: ten
    minutes behind, more than a window and the watermark's lag) is in no
    window; out-of-order ones (``SP_PRODUCER_DISORDER``, a few seconds) are
    never late. Final bars are those of windows the final watermark (the
    latest event time minus the lateness) passed; a window ending within a
    second of it is not judged. Updating volumes hold every on-time trade of
    every window, open ones too. Every trade, late or not, is joined once."""
    from collections import Counter, defaultdict
    from datetime import datetime

    def second(event: dict) -> float:
        return datetime.fromisoformat(event["time"].replace("Z", "+00:00")).timestamp()

    on_time, latest = [], float("-inf")
    for event in sorted(events, key=lambda e: e["id"]):
        if second(event) >= latest - 300:
            on_time.append(event)
        latest = max(latest, second(event))
    watermark = latest - lateness_s

    windows: dict[tuple, list[dict]] = defaultdict(list)
    sliding: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    for event in on_time:
        start = second(event) // 60 * 60
        windows[(event["sym"], start)].append(event)
        for back in range(5):
            sliding[(event["sym"], start - 60 * back)][0] += event["size"]
            sliding[(event["sym"], start - 60 * back)][1] += 1
    expected = {}
    for key, mine in windows.items():
        ordered = sorted(mine, key=lambda e: (second(e), e["id"]))
        prices = [e["price"] for e in mine]
        expected[key] = (ordered[0]["price"], max(prices), min(prices), ordered[-1]["price"],
                         sum(e["size"] for e in mine), len(mine), sum(e["price"] * e["size"] for e in mine))

    emitted = Counter((sym, start) for sym, start, *_ in bars)
    got = {(sym, start): tuple(rest) for sym, start, *rest in bars}
    due = {key for key in expected if key[1] + 60 <= watermark - 1}
    not_due = {key for key in expected if key[1] + 60 > watermark + 1}
    wrong = sorted(str(key) for key in due & got.keys()
                   if got[key][:6] != expected[key][:6] or abs(got[key][6] - expected[key][6]) > 1e-9 * expected[key][6])
    stored = {(sym, start): (volume, trades) for sym, start, volume, trades in volumes}
    syms = {e["id"]: e["sym"] for e in events}
    ids = Counter(row[0] for row in joined)
    return {
        "events": len(events), "late": len(events) - len(on_time), "bars_due": len(due),
        "bars_twice": sorted(str(key) for key, n in emitted.items() if n > 1),
        "bars_missing": sorted(str(key) for key in due - got.keys())[:20],
        "bars_early": sorted(str(key) for key in not_due & got.keys())[:20],
        "bars_unknown": sorted(str(key) for key in got.keys() - expected.keys())[:20],
        "bars_wrong": wrong[:20],
        "volumes_wrong": sorted(str(key) for key in sliding.keys() | stored.keys()
                                if tuple(sliding.get(key, ())) != stored.get(key, ()))[:20],
        "joined_missing": len(syms.keys() - ids.keys()),
        "joined_twice": sorted(i for i, n in ids.items() if n > 1)[:20],
        "joined_unknown": sorted(ids.keys() - syms.keys())[:20],
        "joined_wrong": sorted(i for i, sym, sector in joined if sym != syms.get(i) or sector != sectors.get(sym))[:20],
    }
