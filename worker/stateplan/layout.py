"""The part of a pipeline a restore depends on, by node name: per query (one
per branch, named after its sink) its source and its stateful nodes with
their key and value columns.

Spark numbers a query's stateful operators from the sink upwards (pre-order
over the physical plan: see docs/state-mapping.md), so a node's operator id
follows from its place in the branch: the last stateful node is 0.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from worker.api.graph import Node, Pipeline

if TYPE_CHECKING:
    from worker.checkpointing.manifest import Manifest

# Source parameters that do not change what an offset points at: a new
# schema, batch cap or end reads the same log, so the old offsets still apply.
_POSITION_NEUTRAL_PARAMS = frozenset({"schema", "max_records_per_batch", "bounded"})


@dataclass(frozen=True)
class Column:
    name: str
    type: str                # Spark's simpleString: "string", "bigint", "double"
    expression: str = ""     # value columns: the aggregate expression, whitespace collapsed


@dataclass(frozen=True)
class StateSchema:
    key: tuple[Column, ...]
    value: tuple[Column, ...]


@dataclass(frozen=True)
class StatefulNode:
    name: str
    schema: StateSchema


@dataclass(frozen=True)
class QueryLayout:
    source: str                          # the source node's name
    source_identity: str                 # what it reads (see source_identity)
    stateful: tuple[StatefulNode, ...]   # branch order, upstream first

    def operator_ids(self) -> dict[str, int]:
        """Node name -> Spark operator id."""
        last = len(self.stateful) - 1
        return {node.name: last - index for index, node in enumerate(self.stateful)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QueryLayout:
        def columns(items: list[Mapping[str, Any]]) -> tuple[Column, ...]:
            return tuple(Column(str(c["name"]), str(c["type"]), str(c.get("expression", ""))) for c in items)

        return cls(
            source=str(data["source"]),
            source_identity=str(data["source_identity"]),
            stateful=tuple(
                StatefulNode(str(n["name"]), StateSchema(columns(n["schema"]["key"]), columns(n["schema"]["value"])))
                for n in data["stateful"]
            ),
        )


@dataclass(frozen=True)
class PipelineLayout:
    fingerprint: str
    node_names: tuple[str, ...]
    queries: Mapping[str, QueryLayout]
    batches: Mapping[str, int] = field(default_factory=dict)   # a checkpoint's committed batch per query
    finished: frozenset[str] = frozenset()                      # a checkpoint's finished nodes


def normalize_expression(expression: str) -> str:
    return " ".join(expression.split())


def source_identity(node: Node) -> str:
    """What a source reads, in a form two pipelines can compare."""
    params = {k: v for k, v in node.params.items() if k not in _POSITION_NEUTRAL_PARAMS}
    return f"{node.kind}:{json.dumps(params, sort_keys=True, separators=(',', ':'))}"


def pipeline_layout(pipeline: Pipeline, schemas: Mapping[str, StateSchema]) -> PipelineLayout:
    """The layout of ``pipeline``; ``schemas`` holds every stateful node's
    columns (``worker.stateplan.derive.stateful_schemas``)."""
    queries = {}
    for branch in pipeline.branches:
        source = branch.nodes[0]
        queries[branch.sink.name] = QueryLayout(
            source=source.name,
            source_identity=source_identity(source),
            stateful=tuple(StatefulNode(n.name, schemas[n.name]) for n in branch.nodes if n.is_stateful),
        )
    return PipelineLayout(pipeline.fingerprint(), tuple(n.name for n in pipeline.nodes()), queries)


def checkpoint_layout(manifest: Manifest) -> PipelineLayout | None:
    """The layout a checkpoint was taken with; None for a manifest written
    before layouts were recorded (it cannot say which state is whose)."""
    if any(query.layout is None for query in manifest.queries):
        return None
    return PipelineLayout(
        fingerprint=manifest.pipeline_fingerprint,
        node_names=manifest.node_names,
        queries={query.name: query.layout for query in manifest.queries},
        batches={query.name: query.batch_id for query in manifest.queries},
        finished=frozenset(manifest.finished_nodes),
    )
