"""The Kafka source on Spark's Python Data Source API (``sparkpoint_kafka``).

Spark's own Kafka connector and ``kafka-clients`` come only from Maven;
this reader is Python over ``confluent-kafka`` (librdkafka). Its planning
methods run in one long-lived Python process per query (Spark's streaming
source runner); ``read`` runs in Spark's Python workers, one task per
partition's offset range.

A trigger plans a batch in four steps (``latestOffset``):

1. Ask the brokers for this worker's partitions (``p % N == i``) and their
   earliest and latest offsets; brokers that do not answer mean no batch
   this trigger (nothing is lost: the next trigger asks again).
2. Reconcile the batch's start with them (``offsets.reconcile``): data
   loss fails the query naming topic, partition and offsets, or is logged
   where the user opted out; new partitions start at their earliest.
3. Under ``availableNow`` (``bounded=True``), stop at the ends as of the
   query's start.
4. Cap the batch (``offsets.spread``) and return its end: Spark records it
   in ``offsets/N`` before the batch runs.

Where a new query starts (``earliest``, ``latest`` or explicit offsets) is
resolved once and written to ``initialOffsetsPath`` (in the query's
checkpoint, under ``sources/``, so Sparkpoint's checkpoints and savepoints
carry it): a query restarted before its first batch committed never
re-resolves ``latest``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from sparkpoint.fileio import atomic_create
from worker.sources.kafka import losses as kafka_losses
from worker.sources.kafka import offsets as kafka_offsets
from worker.sources.kafka.broker import Broker, BrokerUnavailable, client_config
from worker.sources.kafka.offsets import Offsets
from worker.sources.log_source import owned_partitions

FORMAT = "sparkpoint_kafka"

log = logging.getLogger("sparkpoint.kafka")


class KafkaDataLossError(RuntimeError):
    """Offsets the query was to read are gone from Kafka, and the source fails on data loss."""


@dataclass(frozen=True)
class KafkaOptions:
    """The source's options, as ``worker.sources.kafka.read_kafka`` sets them."""

    topics: tuple[str, ...]
    config: dict[str, str]            # librdkafka properties (bootstrap.servers included)
    config_files: dict[str, str]      # librdkafka property -> file holding its value (secrets)
    starting_offsets: str             # "earliest", "latest", or JSON {"topic": {"partition": offset}}
    worker_index: int
    worker_count: int
    max_records_per_batch: int        # 0: no cap
    fail_on_data_loss: bool
    metadata: tuple[str, ...]
    initial_offsets_path: str
    data_losses_path: str             # where losses gone past are recorded ("": nowhere)
    stall_timeout_s: float

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> KafkaOptions:
        return cls(
            topics=tuple(json.loads(options["topics"])),
            config=json.loads(options["config"]),
            config_files=json.loads(options.get("configFiles", "{}")),
            starting_offsets=options.get("startingOffsets", "earliest"),
            worker_index=int(options.get("workerIndex", "0")),
            worker_count=int(options.get("workerCount", "1")),
            max_records_per_batch=int(options.get("maxRecordsPerBatch", "0")),
            fail_on_data_loss=options.get("failOnDataLoss", "true").lower() == "true",
            metadata=tuple(json.loads(options.get("metadata", "[]"))),
            initial_offsets_path=options.get("initialOffsetsPath", ""),
            data_losses_path=options.get("dataLossesPath", ""),
            stall_timeout_s=float(options.get("stallTimeoutMs", "60000")) / 1000,
        )

    def client_config(self) -> dict[str, str]:
        """The librdkafka properties, secrets read from their files (here, where they are mounted)."""
        return client_config(self.config, self.config_files)


@dataclass(frozen=True)
class KafkaRange(InputPartition):
    """One task: ``topic``'s ``partition`` from ``start`` up to ``end`` (exclusive)."""

    topic: str
    partition: int
    start: int
    end: int


class KafkaDataSource(DataSource):
    """``spark.readStream.format("sparkpoint_kafka").schema(...).options(...)``;
    the schema is the payload's fields followed by ``kafka_<field>`` columns."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(KafkaOptions.parse(self.options), schema)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: KafkaOptions, schema: StructType) -> None:
        from pyspark.sql.pandas.types import to_arrow_schema

        self.options = options
        self.arrow_schema = to_arrow_schema(schema, timezone="UTC")
        # Planning state: only in the planning process (made on first use, never pickled into tasks).
        self._broker: Broker | None = None
        self._target: Offsets | None = None
        self._latest: Offsets = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "arrow_schema": self.arrow_schema}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _broker=None, _target=None, _latest={})

    # --- planning (Spark's streaming source runner) ---------------------------------------------

    def _brokers(self) -> Broker:
        if self._broker is None:
            self._broker = Broker(self.options.client_config())
        return self._broker

    def _owned(self) -> tuple[Offsets, Offsets]:
        """This worker's partitions now, with their earliest and latest offsets."""
        broker = self._brokers()
        counts = broker.partitions(self.options.topics)
        partitions = [(topic, p) for topic, count in counts.items()
                      for p in owned_partitions(count, self.options.worker_index, self.options.worker_count)]
        return broker.offsets(partitions)

    def initialOffset(self) -> dict:
        path = Path(self.options.initial_offsets_path) if self.options.initial_offsets_path else None
        if path is not None and path.exists():
            return json.loads(path.read_text())
        earliest, latest = self._owned()
        starting = self.options.starting_offsets
        if starting == "earliest":
            chosen = earliest
        elif starting == "latest":
            chosen = latest
        else:
            given = kafka_offsets.from_json(json.loads(starting))
            chosen = {tp: given.get(tp, offset) for tp, offset in earliest.items()}
        resolved = kafka_offsets.to_json(chosen)
        if path is not None:
            try:
                atomic_create(path, json.dumps(resolved).encode())
            except FileExistsError:  # a concurrent start recorded it first: that one holds
                return json.loads(path.read_text())
        return resolved

    def getDefaultReadLimit(self) -> ReadLimit:
        cap = self.options.max_records_per_batch
        return ReadMaxRows(cap) if cap > 0 else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        _, self._target = self._owned()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        # 1. This worker's partitions and their offsets now.
        try:
            earliest, latest = self._owned()
        except BrokerUnavailable as error:
            log.warning("no Kafka batch this trigger: %s", error)
            return start
        self._latest = latest
        # 2. Reconcile the start with what Kafka holds.
        resumed, losses = kafka_offsets.reconcile(kafka_offsets.from_json(start), earliest, latest)
        if losses:
            described = "; ".join(loss.describe() for loss in losses)
            if self.options.fail_on_data_loss:
                raise KafkaDataLossError(f"data loss in the Kafka source: {described} (from_kafka("
                                         "fail_on_data_loss=False) goes on from the earliest offsets instead)")
            log.warning("data loss in the Kafka source, going on (fail_on_data_loss=False): %s", described)
            if self.options.data_losses_path:
                kafka_losses.record(Path(self.options.data_losses_path), losses)
        # 3. Available-now: nothing beyond the ends as of the query's start.
        if self._target is not None:
            latest = {tp: min(offset, self._target.get(tp, resumed[tp])) for tp, offset in latest.items()}
        # 4. The cap.
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return kafka_offsets.to_json(kafka_offsets.spread(resumed, latest, cap))

    def reportLatestOffset(self) -> dict | None:
        return kafka_offsets.to_json(self._latest) if self._latest else None

    def partitions(self, start: dict, end: dict) -> list[KafkaRange]:
        """A task per partition with records in the range. A partition the
        start lacks (new) reads from its earliest offset; one the start is
        ahead of (recreated, the loss accepted) from offset 0, which the
        consumer moves to its earliest."""
        first, last = kafka_offsets.from_json(start), kafka_offsets.from_json(end)
        new = [tp for tp in last if tp not in first]
        earliest = self._brokers().offsets(new)[0] if new else {}
        ranges = []
        for (topic, partition), stop in sorted(last.items()):
            begin = first.get((topic, partition), earliest.get((topic, partition), 0))
            if begin > stop:
                begin = 0
            if stop > begin:
                ranges.append(KafkaRange(topic, partition, begin, stop))
        return ranges

    def commit(self, end: dict) -> None:
        """Nothing: Spark's checkpoint holds the offsets."""

    # --- reading (Spark's Python workers) -------------------------------------------------------

    def read(self, partition: KafkaRange):  # type: ignore[override]
        from worker.sources.kafka.fetch import read_range

        config = {
            **self.options.client_config(),
            "group.id": "sparkpoint",
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "enable.partition.eof": "true",
            # An offset Kafka no longer holds: an error (data loss) or, opted out, the earliest.
            "auto.offset.reset": "error" if self.options.fail_on_data_loss else "earliest",
        }
        return read_range(config, partition.topic, partition.partition, partition.start, partition.end,
                          schema=self.arrow_schema, metadata=self.options.metadata,
                          stall_timeout_s=self.options.stall_timeout_s)
