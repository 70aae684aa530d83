"""The pipeline graph view served by ``GET /pipeline``: every node by name,
which keep state, which have finished."""

from __future__ import annotations

from dataclasses import dataclass

from controller.progress.table import WorkerRecord


@dataclass(frozen=True)
class NodeView:
    name: str
    kind: str                   # e.g. "source.log", "map", "aggregate", "sink.files"
    stateful: bool
    inputs: list[str]           # the nodes feeding it
    finished: bool              # every registered worker has finished it (bounded input read to the end)


@dataclass(frozen=True)
class PipelineView:
    fingerprint: str            # "" until a worker has registered
    nodes: list[NodeView]


def pipeline_view(records: list[WorkerRecord]) -> PipelineView:
    """The graph as the lowest-index worker that sent one runs it (every
    worker runs the same pipeline); a node is finished once every worker
    running that pipeline has finished it."""
    described = sorted((r for r in records if r.nodes), key=lambda r: r.worker_index)
    if not described:
        return PipelineView("", [])
    first = described[0]
    running = [r for r in described if r.pipeline_fingerprint == first.pipeline_fingerprint]
    finished = set.intersection(*(set(r.finished_nodes) for r in running))
    return PipelineView(first.pipeline_fingerprint, [
        NodeView(node.name, node.kind, node.stateful, list(node.inputs), node.name in finished)
        for node in first.nodes])
