"""Turn a pipeline graph into Spark Structured Streaming queries: one per branch.

Each query is named after its sink node and keeps Spark's working checkpoint
under ``SP_WORK_DIR/queries/<sink name>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from worker.api.graph import Node, Pipeline, PipelineError, Stream
from worker.settings import WorkerSettings
from worker.sinks.console import FORMAT as CONSOLE_FORMAT
from worker.sinks.files import FORMAT as FILES_FORMAT
from worker.sources.log_source import FORMAT as LOG_FORMAT


@dataclass(frozen=True)
class QueryPlan:
    """What one branch needs from the outside world, resolved from settings."""

    name: str
    checkpoint_location: Path
    output_mode: str
    source_logs: tuple[Path, ...]


def query_checkpoint_root(settings: WorkerSettings) -> Path:
    return settings.work_dir / "queries"


def plan_branch(branch: Stream, settings: WorkerSettings) -> QueryPlan:
    stateful = any(node.is_stateful for node in branch.nodes)
    return QueryPlan(
        name=branch.sink.name,
        checkpoint_location=query_checkpoint_root(settings) / branch.sink.name,
        output_mode="complete" if stateful else "append",
        source_logs=tuple(settings.log_dir / n.params["log"] for n in branch.nodes if n.kind == "source.log"),
    )


def _apply(df: DataFrame, node: Node) -> DataFrame:
    if node.kind == "map":
        result = node.fn(df)
        if not isinstance(result, DataFrame):
            raise PipelineError(f"map node {node.name!r} returned {type(result).__name__}, not a DataFrame")
        return result
    if node.kind == "filter":
        condition = node.params["condition"] if node.fn is None else node.fn(df)
        return df.filter(condition)
    if node.kind == "aggregate":
        aggregations = [F.expr(expr).alias(column) for column, expr in node.params["aggregations"].items()]
        return df.groupBy(*node.params["by"]).agg(*aggregations)
    raise PipelineError(f"node {node.name!r}: unknown kind {node.kind!r}")


def _read(spark: SparkSession, node: Node, settings: WorkerSettings) -> DataFrame:
    cap = node.params.get("max_records_per_batch", settings.max_records_per_batch)
    return (
        spark.readStream.format(LOG_FORMAT)
        .schema(node.params["schema"])
        .option("path", str(settings.log_dir / node.params["log"]))
        .option("workerIndex", settings.worker_index)
        .option("workerCount", settings.worker_count)
        .option("maxRecordsPerBatch", cap)
        .load()
    )


def start_branch(spark: SparkSession, branch: Stream, settings: WorkerSettings) -> StreamingQuery:
    plan = plan_branch(branch, settings)
    source, *transforms, sink = branch.nodes
    df = _read(spark, source, settings)
    for node in transforms:
        df = _apply(df, node)
    writer = (
        df.writeStream.queryName(plan.name)
        .outputMode(plan.output_mode)
        .option("checkpointLocation", str(plan.checkpoint_location))
        .trigger(processingTime=f"{settings.trigger_interval_ms} milliseconds")
    )
    if sink.kind == "sink.files":
        writer = writer.format(FILES_FORMAT).option("path", str(settings.output_dir / sink.params["directory"]))
    elif sink.kind == "sink.console":
        writer = writer.format(CONSOLE_FORMAT)
    else:
        raise PipelineError(f"node {sink.name!r}: unknown sink kind {sink.kind!r}")
    return writer.option("workerId", settings.worker_id).option("queryName", plan.name).start()


def start_queries(spark: SparkSession, pipeline: Pipeline, settings: WorkerSettings) -> list[StreamingQuery]:
    return [start_branch(spark, branch, settings) for branch in pipeline.branches]
