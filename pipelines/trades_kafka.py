"""Example pipeline on Kafka (``SP_KAFKA_BOOTSTRAP``) and PostgreSQL
(``SP_PG_*``): trade events from the Kafka topic ``trades`` (JSON values) ->
enriched pass-through to a PostgreSQL table and to the Kafka topic
``trades_enriched``, keyed by symbol (both transactional: published when a
checkpoint completes, in one database or Kafka transaction), and per-symbol
VWAP upserted to a PostgreSQL table. The offsets read are Kafka's, recorded in Spark's
checkpoint: a restore resumes each partition exactly where its checkpoint
says, and every trade reaches each sink once.

Run with ``SP_PIPELINE=pipelines/trades_kafka.py``.
"""

from trading import TRADE_SCHEMA, VWAP_AGGREGATIONS, add_vwap, enrich

from worker import api as sp

trades = sp.read.from_kafka("trades", schema=TRADE_SCHEMA, name="trades")
enriched = trades | sp.map(enrich, name="enrich")

sp.run(
    enriched | sp.write.to_postgres("trades_enriched", name="enriched_pg"),
    enriched | sp.write.to_kafka("trades_enriched", key="sym", create=True, name="enriched_kafka"),
    trades
    | sp.aggregate("sym", VWAP_AGGREGATIONS, name="vwap_state")
    | sp.map(add_vwap, name="vwap")
    | sp.write.to_postgres("vwap", key="sym", version="trades", name="vwap_pg"),
)
