"""Turn a pipeline graph into Spark Structured Streaming queries: one per
branch, or per branches that share one (``Pipeline.queries``: stateless
branches differing only in their transactional sinks).

Each query is named as ``Pipeline.queries`` names it (after its sink, or the
node before its sinks) and keeps Spark's working checkpoint under
``<query root>/<query name>`` (the query root is a fresh directory under
``SP_WORK_DIR`` for every worker run; see ``worker.main``). Every sink but the
console stages its batches (``worker.sinks.staging``): a ``foreachBatch``
function in the worker's Python around Spark's own Parquet writer, so no
Python runs in the tasks after the source.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import TimestampNTZType, TimestampType

from sparkpoint.faults import FaultInjector
from sparkpoint.settings import SettingsError
from worker.api.graph import Node, Pipeline, PipelineError, Query
from worker.settings import CHECKPOINT_PHASE, WorkerSettings
from worker.sinks.console import ConsolePrinter
from worker.sinks.staging import BatchStager
from worker.sources.kafka import initial_offsets_file, read_kafka
from worker.sources.kafka.losses import losses_file
from worker.sources.log_source import read_log
from worker.sources.tables import connection_file, read_table


def source_logs(pipeline: Pipeline, settings: WorkerSettings) -> list[Path]:
    """The event log directories the pipeline reads."""
    return sorted({settings.log_dir / node.params["log"] for node in pipeline.nodes() if node.kind == "source.log"})


def output_mode(query: Query) -> str:
    """Spark's: the whole table of an aggregate, the keys a batch changed, or new rows."""
    if query.complete:
        return "complete"
    return "update" if query.branches[0].emits_updates else "append"


def event_time(df: DataFrame, node: Node) -> DataFrame:
    """``df`` with the watermark ``node`` declares, if any (a source's ``watermark=``, ``sp.watermark``)."""
    if node.watermark is None:
        return df
    _require_timestamp(df, node, node.watermark, "watermark")
    return df.withWatermark(node.watermark, node.params["lateness"])


def _require_timestamp(df: DataFrame, node: Node, column: str, what: str) -> None:
    """Refuse, naming the node, an event-time column that is missing or not a timestamp."""
    types = {field.name: field.dataType for field in df.schema.fields}
    if column not in types:
        raise PipelineError(f"node {node.name!r}: its {what} column {column!r} is not among the columns "
                            f"{sorted(types)}")
    if not isinstance(types[column], (TimestampType, TimestampNTZType)):
        raise PipelineError(f"node {node.name!r}: its {what} column {column!r} is {types[column].simpleString()}, "
                            "not a timestamp: declare it as one in the schema, or derive one in an sp.map "
                            "(F.to_timestamp)")


def _empty_table(spark: SparkSession) -> Callable[[Node], DataFrame]:
    return lambda node: spark.createDataFrame([], node.params["schema"])


def _aggregations(node: Node) -> list:
    return [F.expr(expr).alias(column) for column, expr in node.params["aggregations"].items()]


def _window(df: DataFrame, node: Node) -> DataFrame:
    """Per window and key, the aggregations; the window as ``window_start``, ``window_end``."""
    params = node.params
    _require_timestamp(df, node, params["time"], "window's time")
    if "gap" in params:
        window = F.session_window(params["time"], params["gap"])
    else:
        window = F.window(params["time"], params["size"], params.get("slide", params["size"]))
    grouped = df.groupBy(window.alias("window"), *params["by"]).agg(*_aggregations(node))
    return grouped.select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                          *params["by"], *params["aggregations"])


def apply_node(df: DataFrame, node: Node, table: Callable[[Node], DataFrame] | None = None) -> DataFrame:
    """``df`` through ``node``; ``table``: a join's reference table as a
    DataFrame (default: empty, with its schema: enough for analysis)."""
    if node.kind == "watermark":
        return event_time(df, node)
    if node.kind == "join_table":
        static = (table or _empty_table(df.sparkSession))(node)
        return df.join(static, on=node.params["on"], how=node.params["how"])
    if node.kind == "window":
        return _window(df, node)
    if node.kind == "map":
        result = node.fn(df)
        if not isinstance(result, DataFrame):
            raise PipelineError(f"map node {node.name!r} returned {type(result).__name__}, not a DataFrame")
        return result
    if node.kind == "filter":
        condition = node.params["condition"] if node.fn is None else node.fn(df)
        return df.filter(condition)
    if node.kind == "deduplicate":
        if node.params.get("within_watermark"):
            return df.dropDuplicatesWithinWatermark(node.params["by"])
        return df.dropDuplicates(node.params["by"])
    if node.kind == "aggregate":
        return df.groupBy(*node.params["by"]).agg(*_aggregations(node))
    raise PipelineError(f"node {node.name!r}: unknown kind {node.kind!r}")


def trigger_interval_ms(query: Query, settings: WorkerSettings) -> int:
    """Chosen for latency: a query published as its batches come triggers
    often; one published on checkpoint completion need not trigger more
    often than checkpoints complete."""
    return settings.upsert_trigger_interval_ms if query.publishes_immediately else settings.trigger_interval_ms


def checkpoint_phase_ms(settings: WorkerSettings) -> float:
    """Where checkpoints fall in the wall clock's intervals: this share of
    the transactional queries' trigger interval after their triggers. A
    checkpoint then cuts the batches those triggers just committed (their
    output is published when it completes) instead of leaving them to wait
    up to an interval at whatever phase the worker started in, and runs
    between the triggers' bursts of planning (at a trickle the batches a
    trigger starts commit within a few hundred ms)."""
    return settings.trigger_interval_ms * CHECKPOINT_PHASE


def check_sources(pipeline: Pipeline, settings: WorkerSettings) -> None:
    """Refuse, naming the setting, a source (or a reference table) that cannot be read as configured."""
    for node in pipeline.nodes():
        if node.kind == "join_table" and settings.postgres is None:
            raise SettingsError("SP_PG_HOST", f"node {node.name} joins the PostgreSQL table {node.params['table']}: "
                                              "set SP_PG_HOST (or SP_PG_DSN)")
        if node.kind == "source.kafka" and settings.kafka is None:
            raise SettingsError("SP_KAFKA_BOOTSTRAP", f"source {node.name} reads Kafka topic(s) "
                                                      f"{', '.join(node.params['topics'])}: set SP_KAFKA_BOOTSTRAP")


def kafka_topics(pipeline: Pipeline) -> list[str]:
    """The Kafka topics the pipeline reads."""
    return sorted({topic for node in pipeline.nodes() if node.kind == "source.kafka" for topic in node.params["topics"]})


def kafka_queries(pipeline: Pipeline) -> list[Query]:
    """The pipeline's queries that read Kafka."""
    return [query for query in pipeline.queries() if query.source.kind == "source.kafka"]


def kafka_data_losses(pipeline: Pipeline, records: Path) -> dict[str, Path]:
    """Each query reading Kafka: the file of the data losses its source went
    on past, as ``start_query`` with ``records`` has it record them."""
    return {q.name: losses_file(records / q.name) for q in kafka_queries(pipeline)}


def _read(spark: SparkSession, node: Node, settings: WorkerSettings, cap: int | None,
          records: Path) -> DataFrame:
    """``records``: where the query's source records what it resolves once."""
    cap = node.params.get("max_records_per_batch", settings.max_records_per_batch) if cap is None else cap
    if node.kind == "source.kafka":
        config, config_files = settings.kafka
        return read_kafka(spark, node.params["topics"], node.params["schema"], config=config,
                          config_files=config_files, starting_offsets=node.params["starting_offsets"],
                          worker_index=settings.worker_index, worker_count=settings.worker_count,
                          max_records_per_batch=cap, fail_on_data_loss=node.params.get("fail_on_data_loss", True),
                          metadata=node.params.get("metadata", ()),
                          initial_offsets=initial_offsets_file(records, node.params["topics"]),
                          data_losses=losses_file(records))
    return read_log(spark, settings.log_dir / node.params["log"], node.params["schema"],
                    worker_index=settings.worker_index, worker_count=settings.worker_count,
                    max_records_per_batch=cap)


def single_partition(df: DataFrame, node: Node, settings: WorkerSettings) -> DataFrame:
    """A stateful node's input, in one partition when its state has one
    (``SP_SHUFFLE_PARTITIONS=1``): Spark then plans no shuffle before the
    state store, so each batch of the query is one stage, not a map stage
    writing shuffle files and a reduce stage reading them. The state is the
    same (one partition, keyed alike): checkpoints restore either way."""
    return df.coalesce(1) if node.is_stateful and settings.shuffle_partitions == 1 else df


def query_frame(spark: SparkSession, query: Query, settings: WorkerSettings, cap: int | None,
                records: Path) -> DataFrame:
    """The streaming DataFrame a query writes: its source (with its
    watermark), then each node before its sinks. ``cap`` and ``records`` as
    ``_read`` takes them."""
    source, *transforms = query.stem

    def table(node: Node) -> DataFrame:
        connection = connection_file(settings.work_dir, settings.postgres or "")
        return read_table(spark, node.params["table"], node.params["schema"], connection)
    df = event_time(_read(spark, source, settings, cap, records), source)
    for node in transforms:
        df = apply_node(single_partition(df, node, settings), node, table)
    return df


def start_query(spark: SparkSession, query: Query, settings: WorkerSettings, query_root: Path,
                staging: dict[str, Path], cap: int | None = None, records: Path | None = None) -> StreamingQuery:
    """``staging``: each staged sink's staging directory; ``cap``: records
    per batch, whatever the settings and pipeline say (a rehearsal's);
    ``records``: where sources record what they resolve once (Kafka's
    starting offsets), a directory per query: the worker's durable
    ``SP_CHECKPOINT_DIR/sources``, so a run that ends before its first
    checkpoint does not resolve ``latest`` again; None: the query's
    working checkpoint (a rehearsal's, a benchmark's)."""
    name = query.name
    df = query_frame(spark, query, settings, cap, (records or query_root / name / "sources") / name)
    writer = (
        df.writeStream.queryName(name)
        .outputMode(output_mode(query))
        .option("checkpointLocation", str(query_root / name))
    )
    if query.bounded:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{trigger_interval_ms(query, settings)} milliseconds")
    sink = query.sinks[0]
    if sink.name in staging:
        # Files and PostgreSQL sinks stage each batch; the publisher delivers it.
        faults = FaultInjector(settings.test_fault, settings.checkpoint_dir)
        writer = writer.foreachBatch(BatchStager([staging[s.name] for s in query.sinks], faults=faults))
    elif sink.kind == "sink.console":
        writer = writer.foreachBatch(ConsolePrinter(name))
    else:
        raise PipelineError(f"node {sink.name!r}: unknown sink kind {sink.kind!r}")
    return writer.start()


def start_queries(spark: SparkSession, pipeline: Pipeline, settings: WorkerSettings, query_root: Path,
                  staging: dict[str, Path], finished: set[str] = frozenset(),
                  records: Path | None = None) -> list[StreamingQuery]:
    """``staging``: each staged sink's staging directory for this run;
    ``finished``: queries that stay finished (not started); ``records``: as
    ``start_query`` takes it.

    Started together, not one after the other (a take-over waits for the
    last: each start analyses its plan and reads its checkpoint); every
    start is waited for, then the first error, if any, is raised. A
    ``foreachBatch`` start needs py4j's callback server up beforehand (the
    progress listener's registration starts it): starting it is not safe
    from two threads at once."""
    queries = [query for query in pipeline.queries() if query.name not in finished]
    if not queries:
        return []
    with ThreadPoolExecutor(max_workers=len(queries), thread_name_prefix="start-query") as pool:
        starts = [pool.submit(start_query, spark, query, settings, query_root, staging, records=records)
                  for query in queries]
    return [start.result() for start in starts]
