"""``tests/support.py: vwap_differences``: the chaos tests and bench/stack.py
compare a drained vwap table with a batch computation over the log through
it; every column that differs is named, rounding in the notional is not."""

from __future__ import annotations

from tests.support import expected_vwap, vwap_differences

EVENTS = [{"sym": "AAA", "price": 0.1, "size": 3}, {"sym": "AAA", "price": 0.2, "size": 1},
          {"sym": "BBB", "price": 10.0, "size": 2}]


def rows(expected: dict) -> list[dict]:
    return [{"sym": sym, **values} for sym, values in expected.items()]


def test_a_table_equal_to_the_batch_computation_has_no_differences():
    expected = expected_vwap(EVENTS)
    table = rows(expected)
    table[0]["notional"] *= 1 + 1e-12   # summed in another order: equal within rounding
    assert vwap_differences(table, expected) == []


def test_each_differing_column_and_symbol_is_named():
    expected = expected_vwap(EVENTS)
    table = rows(expected)
    table[0] = {**table[0], "trades": 1, "volume": 3, "notional": 0.3}
    assert vwap_differences(table, expected) == ["AAA: trades 1 != 2", "AAA: volume 3 != 4",
                                                 f"AAA: notional 0.3 != {expected['AAA']['notional']}"]


def test_missing_and_unknown_symbols_are_named():
    expected = expected_vwap(EVENTS)
    table = [row for row in rows(expected) if row["sym"] != "BBB"]
    table.append({"sym": "ZZZ", "trades": 1, "volume": 1, "notional": 1.0})
    assert vwap_differences(table, expected) == ["BBB: missing", "ZZZ: never produced"]
