"""The pipeline-authoring API, in KX's pipe style::

    from worker import api as sp

    trades = sp.read.from_log("trades", schema=TRADE_SCHEMA, name="trades")
    # or, from Kafka: sp.read.from_kafka("trades", schema=TRADE_SCHEMA, name="trades")
    sp.run(trades | sp.map(enrich, name="enrich") | sp.write.to_files("enriched", name="files_out"))

Name every stateful node: the name is the identity of its state across
restarts and pipeline changes. Unnamed nodes get ``<kind>_<position>``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from worker.api.eventtime import session_window, watermark, watermark_params, window
from worker.api.graph import Node, Operator, Pipeline, PipelineError, Stream
from worker.api.joins import TABLE_PATTERN, Table, join, table_from_postgres
from worker.api.loader import record_pipeline

__all__ = ["read", "write", "map", "filter", "aggregate", "deduplicate", "watermark", "window", "session_window",
           "join", "run", "Pipeline", "PipelineError", "Table"]

KAFKA_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
# The record fields from_kafka(metadata=...) adds as columns, in their order.
KAFKA_METADATA = ("key", "topic", "partition", "offset", "timestamp")


class _Read:
    @staticmethod
    def from_log(log: str, *, schema: str, name: str | None = None,
                 max_records_per_batch: int | None = None, bounded: bool = False,
                 watermark: str | None = None, lateness: str | None = None) -> Stream:
        """Read the event log ``log`` under ``SP_LOG_DIR``; this worker reads only its partitions.

        ``schema`` is a Spark DDL string of the event fields. ``max_records_per_batch``
        (default: the worker's ``SP_MAX_RECORDS_PER_BATCH``) caps each micro-batch,
        which keeps batches small while a recovering worker replays its backlog.
        ``bounded``: read the log as it is when the query starts, to its end,
        then finish (Spark's ``availableNow`` trigger). Once every branch of a
        node has finished, the node is *finished*: checkpoints record it, a
        restart leaves it finished, and a changed pipeline is refused unless
        ``SP_FORCE_GRAPH_CHANGE=true``.
        ``watermark`` and ``lateness``: the event-time column and how late a
        record may be, as ``sp.watermark`` declares them.
        """
        if max_records_per_batch is not None and max_records_per_batch < 1:
            raise PipelineError(f"from_log({log!r}): max_records_per_batch must be positive")
        params: dict[str, Any] = {"log": log, "schema": schema}
        if max_records_per_batch is not None:
            params["max_records_per_batch"] = max_records_per_batch
        if bounded:
            params["bounded"] = True
        params.update(_source_watermark(f"from_log({log!r})", watermark, lateness))
        return Stream((Node("source.log", params, name),))

    @staticmethod
    def from_kafka(topics: str | list[str], *, schema: str, name: str | None = None,
                   starting_offsets: str | Mapping[str, Mapping[int, int]] = "earliest",
                   max_records_per_batch: int | None = None, bounded: bool = False, fail_on_data_loss: bool = True,
                   metadata: list[str] | tuple[str, ...] = (), watermark: str | None = None,
                   lateness: str | None = None) -> Stream:
        """Read the Kafka topic(s) ``topics`` (brokers from ``SP_KAFKA_BOOTSTRAP``);
        this worker reads only its partitions of each (``p % SP_WORKER_COUNT ==
        SP_WORKER_INDEX``), with ``read_committed`` unless ``SP_KAFKA_CONFIG`` says
        otherwise.

        Each record's value is a JSON object, parsed into ``schema`` (a Spark DDL
        string) as the log's events are; ``metadata`` adds the record's own fields
        as columns ``kafka_<field>``: any of ``key``, ``topic``, ``partition``,
        ``offset``, ``timestamp``. Records without a value (tombstones) are skipped.
        The offsets read are recorded in Spark's checkpoint, and so in
        Sparkpoint's checkpoints and savepoints.

        ``starting_offsets``: where a new pipeline starts, ``"earliest"``,
        ``"latest"`` or ``{topic: {partition: offset}}`` (partitions not named start
        at their earliest); resolved once, at the first batch, and recorded, so a
        restart never resolves ``latest`` again. ``max_records_per_batch`` and
        ``bounded`` as for ``from_log`` (the cap is spread over the partitions by
        their backlog). ``fail_on_data_loss``: records the pipeline was to read and
        Kafka no longer holds (retention, a partition gone, a topic recreated) fail
        the query, naming topic, partition and offsets; ``False`` logs them and goes
        on from the earliest offsets Kafka has. ``watermark`` and ``lateness``
        as for ``from_log``.
        """
        names = [topics] if isinstance(topics, str) else list(topics)
        if not names or any(not isinstance(t, str) or not KAFKA_TOPIC.match(t) for t in names):
            raise PipelineError(f"from_kafka({topics!r}): a topic name is 1 to 249 letters, digits, '.', '_' or '-'")
        label = f"from_kafka({names[0] if len(names) == 1 else names!r})"
        if max_records_per_batch is not None and max_records_per_batch < 1:
            raise PipelineError(f"{label}: max_records_per_batch must be positive")
        unknown = sorted(set(metadata) - set(KAFKA_METADATA))
        if unknown:
            raise PipelineError(f"{label}: metadata {unknown} unknown: choose from {list(KAFKA_METADATA)}")
        params: dict[str, Any] = {"topics": names, "schema": schema,
                                  "starting_offsets": _starting_offsets(label, starting_offsets)}
        if max_records_per_batch is not None:
            params["max_records_per_batch"] = max_records_per_batch
        if bounded:
            params["bounded"] = True
        if not fail_on_data_loss:
            params["fail_on_data_loss"] = False
        if metadata:
            params["metadata"] = [field for field in KAFKA_METADATA if field in metadata]
        params.update(_source_watermark(label, watermark, lateness))
        return Stream((Node("source.kafka", params, name),))

    table_from_postgres = staticmethod(table_from_postgres)


def _source_watermark(label: str, column: str | None, lateness: str | None) -> dict[str, str]:
    """A source's watermark parameters: both or neither."""
    if column is None and lateness is None:
        return {}
    if column is None or lateness is None:
        raise PipelineError(f"{label}: a watermark needs both watermark= (the event-time column) and lateness= "
                            "(how late a record may be, e.g. '10 seconds')")
    return watermark_params(label, column, lateness)


def _starting_offsets(label: str, given: str | Mapping[str, Mapping[int, int]]) -> str:
    """``earliest``, ``latest`` or explicit offsets as JSON ``{"topic": {"partition": offset}}``."""
    if given in ("earliest", "latest"):
        return given
    if isinstance(given, Mapping):
        try:
            explicit = {str(topic): {str(int(p)): int(o) for p, o in partitions.items()}
                        for topic, partitions in given.items()}
        except (AttributeError, TypeError, ValueError):
            explicit = None
        if explicit is not None and all(o >= 0 for parts in explicit.values() for o in parts.values()):
            return json.dumps(explicit, sort_keys=True)
    raise PipelineError(f"{label}: starting_offsets is 'earliest', 'latest' or {{topic: {{partition: offset}}}} "
                        f"with offsets of 0 or more, got {given!r}")


class _Write:
    """Sinks. Each says which delivery contract it keeps."""

    @staticmethod
    def to_files(directory: str, *, name: str | None = None) -> Operator:
        """Write Parquet files under ``SP_OUTPUT_DIR/<directory>``, one per batch and task.

        Contract: transactional, published on checkpoint completion. Each batch
        is staged durably on the worker's volume; when a checkpoint covering it
        completes (about one ``SP_CHECKPOINT_FREQ`` later) its files are placed
        in the directory, then the worker's mark ``_published/<worker>.json`` is
        written atomically. Readers (``worker.publishing.targets.files.read_published``) see
        each worker's files up to its mark: every row exactly once. With
        ``SP_CHECKPOINT_FREQ=0`` batches are published as they come and a
        restart replays the source from its beginning: at-least-once.
        """
        return Operator(Node("sink.files", {"directory": directory}, name))

    @staticmethod
    def to_postgres(table: str, *, key: str | list[str] | None = None, version: str | None = None,
                    name: str | None = None) -> Operator:
        """Write to the PostgreSQL table ``table`` (``schema.table`` allowed), created
        if missing with columns from the rows; the connection comes from ``SP_PG_*``.

        Without ``key``, contract: transactional, published on checkpoint
        completion. Staged batches are written when a checkpoint covering them
        completes, in one transaction that also records "published up to" in
        ``sparkpoint_sink_progress``: every row exactly once. Needs checkpoints
        (``SP_CHECKPOINT_FREQ`` > 0). An aggregating branch's table is replaced per
        worker (the table gets a ``sparkpoint_worker`` column).

        With ``key`` and ``version``, contract: idempotent upsert, low latency.
        Each batch is written as soon as it is staged, with ``INSERT ... ON
        CONFLICT (key) DO UPDATE`` only where the stored ``version`` is older.
        ``version`` must increase with the input for each key (a running count
        does), so a replay never moves a row backwards; each key must be owned by
        one worker (partition the input by it). The key is the table's primary key.
        """
        if not TABLE_PATTERN.match(table):
            raise PipelineError(f"to_postgres({table!r}): a table name is lower-case letters, digits and '_', "
                                "optionally after a schema name and a dot")
        keys = [key] if isinstance(key, str) else list(key or [])
        if bool(keys) != bool(version):
            raise PipelineError(f"to_postgres({table!r}): an upsert needs both key= and version=; "
                                "give neither for a transactional table")
        if version in keys:
            raise PipelineError(f"to_postgres({table!r}): the version column {version!r} cannot be part of the key")
        params: dict[str, Any] = {"table": table}
        if keys:
            params.update(key=keys, version=version)
        return Operator(Node("sink.postgres", params, name))

    @staticmethod
    def to_kafka(topic: str, *, key: str | None = None, create: bool = False, name: str | None = None) -> Operator:
        """Write each row as a JSON record to the Kafka topic ``topic``, keyed by
        the column ``key`` if given (and so partitioned by it, murmur2 as Kafka's
        Java producer does); the brokers come from ``SP_KAFKA_BOOTSTRAP``.

        Contract: transactional, published on checkpoint completion, as Flink's
        exactly-once Kafka sink. Each batch is staged durably; when a checkpoint
        covering it completes it is produced inside a Kafka transaction of the
        producer ``sparkpoint.<worker>.<sink>``, which also commits the mark
        "published up to" (an offset of the group ``sparkpoint-sink.<worker>.<sink>``):
        ``read_committed`` consumers see every row exactly once, across crashes
        and take-overs (a new holder's producer fences the old one). Needs
        checkpoints (``SP_CHECKPOINT_FREQ`` > 0). The topic must exist, unless
        ``create=True`` (the brokers' default partitions and replication).
        """
        if not KAFKA_TOPIC.fullmatch(topic or ""):
            raise PipelineError(f"to_kafka({topic!r}): a Kafka topic name is 1 to 249 letters, digits, '.', '_' "
                                "and '-'")
        if key is not None and not (isinstance(key, str) and key):
            raise PipelineError(f"to_kafka({topic!r}): key is a column name, got {key!r}")
        params: dict[str, Any] = {"topic": topic}
        if key is not None:
            params["key"] = key
        if create:
            params["create"] = True
        return Operator(Node("sink.kafka", params, name))

    @staticmethod
    def to_console(*, name: str | None = None) -> Operator:
        """Print each batch. Contract: at-least-once (a replay prints again)."""
        return Operator(Node("sink.console", {}, name))


read = _Read()
write = _Write()


def map(fn: Callable[[Any], Any], *, name: str | None = None) -> Operator:  # noqa: A001 - KX's name
    """Apply ``fn(DataFrame) -> DataFrame`` to each micro-batch's rows."""
    if not callable(fn):
        raise PipelineError(f"sp.map() needs a function DataFrame -> DataFrame, got {fn!r}")
    return Operator(Node("map", {}, name, fn))


def filter(condition: str | Callable[[Any], Any], *, name: str | None = None) -> Operator:  # noqa: A001
    """Keep rows matching a SQL condition (``"size > 0"``) or ``fn(DataFrame) -> Column``."""
    if isinstance(condition, str):
        return Operator(Node("filter", {"condition": condition}, name))
    if callable(condition):
        return Operator(Node("filter", {}, name, condition))
    raise PipelineError(f"sp.filter() needs a SQL condition or a function, got {condition!r}")


EMITS = ("updates", "table")


def aggregate(by: str | list[str], aggregations: Mapping[str, str], *, emit: str | None = None,
              name: str | None = None) -> Operator:
    """A keyed running aggregation: ``aggregations`` maps output columns to SQL
    aggregate expressions, e.g. ``{"volume": "sum(size)"}``. Stateful: name it.

    ``emit``: what each micro-batch writes.

    - ``"updates"``: only the keys the batch changed, each with its new
      aggregates (Spark's update mode): a batch costs what its input touches,
      however many keys the state holds. For sinks that take updates: an
      upsert (``to_postgres(key=, version=)``; the default there), Kafka (a
      changelog), the console.
    - ``"table"``: the whole result table (Spark's complete mode), which a
      transactional sink (files, PostgreSQL) replaces per worker each
      checkpoint; the default for every sink but an upsert.
    """
    keys = [by] if isinstance(by, str) else list(by)
    if not keys or not aggregations:
        raise PipelineError("sp.aggregate() needs key columns and at least one aggregation")
    if emit is not None and emit not in EMITS:
        raise PipelineError(f"sp.aggregate(emit={emit!r}): emit is 'updates' (the keys each batch changed) or "
                            "'table' (the whole result table each batch)")
    params: dict[str, Any] = {"by": keys, "aggregations": dict(aggregations)}
    if emit is not None:
        params["emit"] = emit
    return Operator(Node("aggregate", params, name))


def deduplicate(by: str | list[str], *, within_watermark: bool = False, name: str | None = None) -> Operator:
    """Drop rows whose ``by`` columns were seen before (e.g. an event id
    delivered twice). Stateful: name it.

    By default its state holds every key seen, for the life of the
    pipeline: for sources without event time. ``within_watermark=True``
    (Spark's ``dropDuplicatesWithinWatermark``; needs a watermark upstream):
    a key is remembered until the watermark passes its first event time by
    the lateness, then forgotten, so the state stays as large as the keys
    of that span; duplicates further apart than that are not caught.
    """
    keys = [by] if isinstance(by, str) else list(by)
    if not keys:
        raise PipelineError("sp.deduplicate() needs key columns")
    return Operator(Node("deduplicate", {"by": keys, **({"within_watermark": True} if within_watermark else {})},
                         name))


def run(*streams: Stream) -> Pipeline:
    """Declare the pipeline: each stream must end in a sink."""
    pipeline = Pipeline.of(*streams)
    record_pipeline(pipeline)
    return pipeline
