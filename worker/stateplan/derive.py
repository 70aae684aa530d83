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


def deduplicate_schema(node: Node, input_: StructType) -> StateSchema:
    """A deduplicate node's state: the key columns it has seen (no value)."""
    types = {f.name: f.dataType.simpleString() for f in input_.fields}
    return StateSchema(key=tuple(Column(name, types[name]) for name in node.params["by"]), value=())


def stateful_schemas(pipeline: Pipeline, spark: SparkSession) -> dict[str, StateSchema]:
    """Node name -> key and value columns, for every stateful node."""
    from worker.runtime.queries import apply_node

    schemas = {}
    for branch in pipeline.branches:
        source, *transforms, _sink = branch.nodes
        df = spark.createDataFrame([], source.params["schema"])
        for node in transforms:
            before = df.schema
            df = apply_node(df, node)
            if node.kind == "deduplicate":
                schemas[node.name] = deduplicate_schema(node, before)
            elif node.is_stateful:
                schemas[node.name] = aggregate_schema(node, df.schema)
    return schemas
