"""The windows chaos scenario's check (tests/chaos/windows_check.py) finds
what it is there to find: a bar twice, missing, early or wrong, a volume
off, a trade joined twice or not at all; and it takes a trade ten minutes
behind as late, one a few seconds behind as on time."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from tests.chaos.windows_check import compared

EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
SECTORS = {"AAPL": "Technology"}


def trade(i: int, second: float, price: float = 10.0, size: int = 1) -> dict:
    return {"id": i, "sym": "AAPL", "price": price, "size": size,
            "time": (EPOCH + timedelta(seconds=second)).isoformat().replace("+00:00", "Z")}


# Minute 10 (600-660 s): two trades, the second 2 s out of order; minute 11 is
# still open at the end (the last trade at 690 s: watermark 680 s). Trade 3
# is ten minutes late: in no window.
EVENTS = [trade(0, 605, 10.0, 2), trade(1, 603, 12.0, 3), trade(2, 661, 11.0, 1), trade(3, 62), trade(4, 690)]
START = EPOCH.timestamp() + 600
BAR = ("AAPL", START, 12.0, 12.0, 10.0, 10.0, 5, 2, 56.0)
# Five-minute windows every minute: from minute 6 (minute 10's trades) to 11 (minute 11's).
VOLUMES = [("AAPL", START - 240, 5, 2), *[("AAPL", START - 60 * back, 7, 4) for back in range(4)],
           ("AAPL", START + 60, 2, 2)]
JOINED = [(e["id"], "AAPL", "Technology") for e in EVENTS]


def test_exact_results_show_no_problem():
    result = compared(EVENTS, [BAR], VOLUMES, JOINED, SECTORS)
    assert (result["events"], result["late"], result["bars_due"]) == (5, 1, 1)
    assert all(result[key] in ([], 0) for key in result if key not in ("events", "late", "bars_due"))


def test_each_problem_is_named():
    early = ("AAPL", START + 60, 11.0, 11.0, 11.0, 11.0, 1, 1, 11.0)
    wrong = BAR[:4] + (11.0,) + BAR[5:]
    assert compared(EVENTS, [BAR, BAR], VOLUMES, JOINED, SECTORS)["bars_twice"] == [str(("AAPL", START))]
    assert compared(EVENTS, [], VOLUMES, JOINED, SECTORS)["bars_missing"] == [str(("AAPL", START))]
    assert compared(EVENTS, [BAR, early], VOLUMES, JOINED, SECTORS)["bars_early"] == [str(("AAPL", START + 60))]
    assert compared(EVENTS, [wrong], VOLUMES, JOINED, SECTORS)["bars_wrong"] == [str(("AAPL", START))]
    assert compared(EVENTS, [BAR], VOLUMES[1:], JOINED, SECTORS)["volumes_wrong"] == [str(("AAPL", START - 240))]
    assert compared(EVENTS, [BAR], VOLUMES, JOINED + JOINED[:1], SECTORS)["joined_twice"] == [0]
    assert compared(EVENTS, [BAR], VOLUMES, JOINED[1:], SECTORS)["joined_missing"] == 1
    assert compared(EVENTS, [BAR], VOLUMES, [(0, "AAPL", "Energy")] + JOINED[1:], SECTORS)["joined_wrong"] == [0]
