"""Example pipeline on PostgreSQL (``SP_PG_*`` settings): trade events ->
enriched pass-through to a PostgreSQL table (transactional: published when a
checkpoint completes) and to files, and per-symbol VWAP to a PostgreSQL table
(idempotent upsert on ``sym``, versioned by the running trade count: low
latency, and a replay never moves a row backwards).

Run with ``SP_PIPELINE=pipelines/trades_postgres.py``.
"""

from trading import TRADE_SCHEMA, VWAP_AGGREGATIONS, add_vwap, enrich

from worker import api as sp

trades = sp.read.from_log("trades", schema=TRADE_SCHEMA, name="trades")
enriched = trades | sp.map(enrich, name="enrich")

sp.run(
    enriched | sp.write.to_postgres("trades_enriched", name="enriched_pg"),
    enriched | sp.write.to_files("trades_enriched", name="enriched_out"),
    trades
    | sp.aggregate("sym", VWAP_AGGREGATIONS, name="vwap_state")
    | sp.map(add_vwap, name="vwap")
    | sp.write.to_postgres("vwap", key="sym", version="trades", name="vwap_pg"),
)
