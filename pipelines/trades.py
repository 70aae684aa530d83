"""Example pipeline: trade events -> enriched pass-through, and per-symbol VWAP,
both to files (transactional: published when a checkpoint completes).

Run with ``SP_PIPELINE=pipelines/trades.py`` (the default of ``make run``).
"""

from trading import TRADE_SCHEMA, VWAP_AGGREGATIONS, add_vwap, enrich

from worker import api as sp

trades = sp.read.from_log("trades", schema=TRADE_SCHEMA, name="trades")

sp.run(
    trades
    | sp.map(enrich, name="enrich")
    | sp.write.to_files("trades_enriched", name="enriched_out"),
    trades
    | sp.aggregate("sym", VWAP_AGGREGATIONS, name="vwap_state")
    | sp.map(add_vwap, name="vwap")
    | sp.write.to_files("vwap", name="vwap_out"),
)
