"""The part of a pipeline a restore depends on, by node name: per query
(``Pipeline.queries``) its source, its stateful nodes and its sinks
(``worker.checkpointing.layout``), derived from the pipeline graph or read
from a checkpoint's manifest.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from worker.api.graph import Node, Pipeline
from worker.checkpointing.layout import QueryLayout, StatefulNode, StateSchema
from worker.checkpointing.manifest import Manifest

# Source parameters that do not change what an offset points at: a new
# schema, batch cap or end reads the same log (or topics), so the old offsets
# still apply; so do a Kafka source's starting offsets (only a new query
# starts there), its choice on data loss and the metadata columns it adds.
_POSITION_NEUTRAL_PARAMS = frozenset({"schema", "max_records_per_batch", "bounded", "starting_offsets",
                                      "fail_on_data_loss", "metadata"})


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
    for query in pipeline.queries():
        queries[query.name] = QueryLayout(
            source=query.source.name,
            source_identity=source_identity(query.source),
            stateful=tuple(StatefulNode(n.name, schemas[n.name]) for n in query.stateful),
            sinks=tuple(sink.name for sink in query.sinks),
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
        # Before sinks were recorded, each query was one branch, named after its sink.
        queries={query.name: replace(query.layout, sinks=query.layout.sinks or (query.name,))
                 for query in manifest.queries},
        batches={query.name: query.batch_id for query in manifest.queries},
        finished=frozenset(manifest.finished_nodes),
    )
