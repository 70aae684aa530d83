"""Example pipeline in event time (``SP_PG_*`` settings): one-minute OHLC
bars with VWAP per symbol, each emitted once when the watermark passes its
end (final, to a transactional PostgreSQL table: exactly once), and a
five-minute volume per symbol sliding every minute, upserted as it changes
(updating); and each trade with its symbol's sector from the reference
table ``symbols`` (read again every batch; create it with
``pipelines/symbols.sql``), to a transactional table. A trade is late for a
window once the watermark, ten seconds behind the latest event time, has
passed the window's end: dropped and counted per window node (``/metrics``:
``sparkpoint_node_late_rows_total``; the status page's graph).

Run with ``SP_PIPELINE=pipelines/trades_windows.py``; ``SP_PRODUCER_DISORDER``
and ``SP_PRODUCER_LATE_FRACTION`` make the producer's trades out of order and late.
"""

from trading import BAR_AGGREGATIONS, TRADE_SCHEMA, add_vwap

from worker import api as sp

trades = sp.read.from_log("trades", schema=TRADE_SCHEMA, name="trades", watermark="time", lateness="10 seconds")
symbols = sp.read.table_from_postgres("symbols", schema="sym string, sector string")

sp.run(
    trades
    | sp.window("time", "1 minute", BAR_AGGREGATIONS, by="sym", name="bars_1m")
    | sp.map(add_vwap, name="bar_vwap")
    | sp.write.to_postgres("bars_1m", name="bars_pg"),
    trades
    | sp.window("time", "5 minutes", {"volume": "sum(size)", "trades": "count(1)"}, by="sym", slide="1 minute",
                emit="updates", name="volume_5m")
    | sp.write.to_postgres("volume_5m", key=["sym", "window_start"], version="trades", name="volume_pg"),
    trades
    | sp.join(symbols, on="sym", name="with_sector")
    | sp.write.to_postgres("trades_by_sector", name="sectors_pg"),
)
