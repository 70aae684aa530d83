"""Kafka topics as a Spark streaming source (``sp.read.from_kafka``).

Offsets are Kafka offsets per topic-partition, recorded in Spark's
checkpoint before each batch runs (and so in Sparkpoint's checkpoints and
savepoints); worker ``i`` of ``n`` reads the partitions ``p % n == i`` of
each topic; values are JSON records parsed into the pipeline's schema;
``read_committed`` by default. See ``datasource`` for how a batch is
planned, ``fetch`` for how it is read.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from worker.sources.kafka.datasource import FORMAT, KafkaDataSource
from worker.sources.kafka.records import METADATA_PREFIX

# DDL of the record fields ``metadata=`` adds, as ``kafka_<field>`` columns.
METADATA_DDL = {"key": "string", "topic": "string", "partition": "int", "offset": "long", "timestamp": "timestamp"}



def initial_offsets_file(directory: Path, topics: Sequence[str]) -> Path:
    """Where a query reading ``topics`` records its resolved starting offsets
    in ``directory`` (a query's own): named by the topics, so a source that
    reads others starts afresh."""
    digest = hashlib.sha256(json.dumps(sorted(topics)).encode()).hexdigest()[:12]
    return directory / f"kafka-initial-offsets-{digest}.json"


def read_kafka(spark: SparkSession, topics: Sequence[str], schema: str, *, config: Mapping[str, str],
               config_files: Mapping[str, str] = {}, starting_offsets: str = "earliest", worker_index: int = 0,
               worker_count: int = 1, max_records_per_batch: int = 0, fail_on_data_loss: bool = True,
               metadata: Sequence[str] = (), initial_offsets: Path | None = None,
               data_losses: Path | None = None, stall_timeout_ms: int = 60_000) -> DataFrame:
    """A streaming DataFrame of ``topics``' JSON records with ``schema`` (a
    DDL string), then a ``kafka_<field>`` column for each of ``metadata``.
    ``config``: librdkafka properties (``bootstrap.servers`` among them);
    ``config_files``: properties whose values are read from files where the
    records are read (secrets); ``initial_offsets``: the file where the
    resolved starting offsets are recorded (``initial_offsets_file``);
    ``data_losses``: the file where losses gone past are recorded
    (``losses.losses_file``)."""
    spark.dataSource.register(KafkaDataSource)
    columns = ", ".join([schema] + [f"{METADATA_PREFIX}{name} {METADATA_DDL[name]}" for name in metadata])
    options = {
        "topics": json.dumps(list(topics)),
        "config": json.dumps(dict(config)),
        "configFiles": json.dumps(dict(config_files)),
        "startingOffsets": starting_offsets,
        "workerIndex": str(worker_index),
        "workerCount": str(worker_count),
        "maxRecordsPerBatch": str(max_records_per_batch),
        "failOnDataLoss": str(fail_on_data_loss).lower(),
        "metadata": json.dumps(list(metadata)),
        "stallTimeoutMs": str(stall_timeout_ms),
    }
    if initial_offsets is not None:
        options["initialOffsetsPath"] = str(initial_offsets)
    if data_losses is not None:
        options["dataLossesPath"] = str(data_losses)
    return spark.readStream.format(FORMAT).schema(columns).options(**options).load()
