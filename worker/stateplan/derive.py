"""Stateful nodes' key and value columns, from Spark's analyser.

Each branch is built on an empty DataFrame with its source's schema, through
the same node functions the streaming query uses: analysis only, no query
starts and nothing is read. It needs a Spark session (seconds to start; a
worker already has one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from worker.api.graph import Node, Pipeline
from worker.checkpointing.layout import Column, StateSchema
from worker.stateplan.layout import normalize_expression

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType


def aggregate_schema(node: Node, output: StructType) -> StateSchema:
    """An aggregate node's state from the schema of its output: the grouping
    columns are the key; each aggregation column, with its expression, the value.

    The expression is part of the value: Spark's own check compares types
    only, and restarts ``sum(size)`` as ``max(size)`` without a word.
    """
    types = {f.name: f.dataType.simpleString() for f in output.fields}
    return StateSchema(
        key=tuple(Column(name, types[name]) for name in node.params["by"]),
        value=tuple(Column(name, types[name], normalize_expression(expression))
                    for name, expression in node.params["aggregations"].items()),
    )


def window_schema(node: Node, output: StructType) -> StateSchema:
    """A window node's state: the window (its kind and durations as its
    expression: a window of another size is other state) and the ``by``
    columns are the key; the aggregations, the value."""
    params = node.params
    spec = (f"session_window({params['time']}, {params['gap']})" if "gap" in params else
            f"window({params['time']}, {params['size']}, {params.get('slide', params['size'])})")
    aggregates = aggregate_schema(node, output)
    window = Column("window", "struct<start:timestamp,end:timestamp>", spec)
    return StateSchema(key=(window, *aggregates.key), value=aggregates.value)


def deduplicate_schema(node: Node, input_: StructType) -> StateSchema:
    """A deduplicate node's state: the key columns it has seen; within a
    watermark, with the event time each key expires at as its value."""
    types = {f.name: f.dataType.simpleString() for f in input_.fields}
    value = (Column("expires_at", "bigint", "within watermark"),) if node.params.get("within_watermark") else ()
    return StateSchema(key=tuple(Column(name, types[name]) for name in node.params["by"]), value=value)


def stateful_schemas(pipeline: Pipeline, spark: SparkSession) -> dict[str, StateSchema]:
    """Node name -> key and value columns, for every stateful node."""
    from worker.runtime.queries import apply_node, event_time

    schemas = {}
    for branch in pipeline.branches:
        source, *transforms, _sink = branch.nodes
        df = event_time(spark.createDataFrame([], source.params["schema"]), source)
        for node in transforms:
            before = df.schema
            df = apply_node(df, node)
            if node.kind == "deduplicate":
                schemas[node.name] = deduplicate_schema(node, before)
            elif node.kind == "window":
                schemas[node.name] = window_schema(node, df.schema)
            elif node.is_stateful:
                schemas[node.name] = aggregate_schema(node, df.schema)
    return schemas
