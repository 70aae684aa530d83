"""Shared by the example pipelines (``trades.py``, ``trades_postgres.py``,
``trades_windows.py``): the trade event schema, the enrichment, the
per-symbol VWAP and one-minute bars.

Not a pipeline itself: it calls no ``sp.run``. A pipeline file imports it
from beside itself (the loader puts the file's directory on the path).
"""

from pyspark.sql import functions as F

TRADE_SCHEMA = "id long, sym string, price double, size long, time timestamp"

# Per-symbol running aggregates; ``trades`` (a count) only grows, so it is the
# version of a symbol's row in an upsert.
VWAP_AGGREGATIONS = {"notional": "sum(price * size)", "volume": "sum(size)", "trades": "count(1)"}


# A window's OHLC bar: the first and last price by event time (ties broken by
# id, so a replay picks the same trade), the extremes, and the VWAP's parts.
BAR_AGGREGATIONS = {
    "open": "min_by(price, struct(time, id))", "high": "max(price)", "low": "min(price)",
    "close": "max_by(price, struct(time, id))", **VWAP_AGGREGATIONS,
}


def enrich(df):
    return df.withColumn("notional", F.col("price") * F.col("size"))


def add_vwap(df):
    return df.withColumn("vwap", F.col("notional") / F.col("volume"))
