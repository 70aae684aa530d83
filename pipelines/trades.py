"""Example pipeline: trade events -> enriched pass-through, and per-symbol VWAP.

Run with ``SP_PIPELINE=pipelines/trades.py`` (the default of ``make run``).
"""

from pyspark.sql import functions as F

from worker import api as sp

TRADE_SCHEMA = "id long, sym string, price double, size long, time timestamp"


def enrich(df):
    return df.withColumn("notional", F.col("price") * F.col("size"))


def add_vwap(df):
    return df.withColumn("vwap", F.col("notional") / F.col("volume"))


trades = sp.read.from_log("trades", schema=TRADE_SCHEMA, name="trades")

sp.run(
    trades
    | sp.map(enrich, name="enrich")
    | sp.write.to_files("trades_enriched", name="enriched_out"),
    trades
    | sp.aggregate("sym", {"notional": "sum(price * size)", "volume": "sum(size)", "trades": "count(1)"},
                   name="vwap_state")
    | sp.map(add_vwap, name="vwap")
    | sp.write.to_files("vwap", name="vwap_out"),
)
