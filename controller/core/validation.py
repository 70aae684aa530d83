"""Every message a worker sends, checked before the controller records
anything of it: ids, names, numbers and sizes within ``sparkpoint.limits``.

A message outside them is refused (``InvalidRequest``: gRPC
``INVALID_ARGUMENT``) with a short message naming the field; the value is
quoted cut short, never whole. Free text is clipped instead: a worker whose
errors are long must still show them. Pure functions, no state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from controller.core.errors import InvalidRequest
from sparkpoint import limits
from sparkpoint.errors import clip, shown
from sparkpoint.messages import (
    CheckpointInfo,
    ExportAnswer,
    PipelineNode,
    ProgressReport,
    QueryCut,
    QueryProgress,
    Registration,
    SavepointAnswer,
    SinkProgress,
    StandbyReport,
)

INT64_MAX = 2**63 - 1
PID_MAX = 2**22         # Linux's pid_max ceiling


def name(value: str, field: str) -> str:
    if not limits.NAME.fullmatch(value):
        raise InvalidRequest(f"{field}: {shown(value)} is not a valid name ({limits.NAME_RULE})")
    return value


def _token(value: str, field: str) -> str:
    if len(value) > limits.TOKEN_MAX or not value.isprintable():
        raise InvalidRequest(f"{field}: {shown(value)} is not valid (printable, at most {limits.TOKEN_MAX} "
                             "characters)")
    return value


def _count(items: Sequence | Mapping, field: str, maximum: int) -> None:
    if len(items) > maximum:
        raise InvalidRequest(f"{field}: {len(items)} entries, at most {maximum} are accepted")


# Each collection (repeated or map field) a request may hold, by field name:
# how many entries. One not named here may hold none.
COLLECTIONS = {
    "queries": limits.MAX_QUERIES, "sinks": limits.MAX_QUERIES,
    "offsets": limits.MAX_PARTITIONS, "latest_offsets": limits.MAX_PARTITIONS,
    "node_names": limits.MAX_NODES, "nodes": limits.MAX_NODES, "inputs": limits.MAX_NODES,
    "finished_nodes": limits.MAX_NODES, "late_rows": limits.MAX_NODES,
    "checkpoints": limits.MAX_CHECKPOINTS,
    "savepoint_answers": limits.MAX_ANSWERS, "exports": limits.MAX_ANSWERS,
}


def collections(message: Any, field: str = "") -> None:
    """A request as it arrived (a protobuf message), before anything of it is
    converted: every collection within ``COLLECTIONS``' bounds, so an
    oversize one is refused before it is built. Raises ``InvalidRequest``."""
    for descriptor, value in message.ListFields():
        name = f"{field}{descriptor.name}"
        if descriptor.is_repeated:          # maps too: repeated entries
            _count(value, name, COLLECTIONS.get(descriptor.name, 0))
            if descriptor.message_type is not None and not descriptor.message_type.GetOptions().map_entry:
                for i, item in enumerate(value):
                    collections(item, f"{name}[{i}].")
        elif descriptor.message_type is not None:
            collections(value, f"{name}.")


def _integer(value: int, field: str, minimum: int = 0, maximum: int = INT64_MAX) -> int:
    if not minimum <= value <= maximum:
        raise InvalidRequest(f"{field}: {value} is outside {minimum}..{maximum}")
    return value


def _real(value: float, field: str) -> float:
    if not math.isfinite(value) or value < 0:
        raise InvalidRequest(f"{field}: {value} is not a finite number >= 0")
    return value


def checkpoint_id(value: int, field: str) -> int:
    return _integer(value, field, 1, limits.CHECKPOINT_ID_MAX)


def believable(checkpoint: int, last_known: int, field: str) -> None:
    """Refuse an id further past the newest one the controller knows of the
    worker than a worker can count without it (``CHECKPOINT_ID_STEP_MAX``)."""
    if checkpoint > last_known + limits.CHECKPOINT_ID_STEP_MAX:
        raise InvalidRequest(f"{field}: checkpoint {checkpoint} is more than {limits.CHECKPOINT_ID_STEP_MAX} past "
                             f"the newest one known of this worker ({last_known}): not believed")


def all_believable(checkpoints: Sequence[CheckpointInfo], last_known: int, field: str) -> None:
    """``believable`` for the newest of a list the worker holds (none: nothing to check)."""
    if checkpoints:
        believable(max(c.checkpoint_id for c in checkpoints), last_known, field)


def _offsets(offsets: Mapping[str, int], field: str) -> None:
    _count(offsets, field, limits.MAX_PARTITIONS)
    for partition, offset in offsets.items():
        if not limits.PARTITION.fullmatch(partition):
            raise InvalidRequest(f"{field}: {shown(partition)} is not a partition (a number, or <topic>:<number>)")
        _integer(offset, f"{field}[{partition}]")


def _query_cut(cut: QueryCut, field: str) -> None:
    name(cut.name, f"{field}.name")
    _integer(cut.batch_id, f"{field}.batch_id", -1)
    _offsets(cut.offsets, f"{field}.offsets")


def checkpoint(info: CheckpointInfo, field: str) -> CheckpointInfo:
    checkpoint_id(info.checkpoint_id, f"{field}.checkpoint_id")
    _count(info.queries, f"{field}.queries", limits.MAX_QUERIES)
    for i, cut in enumerate(info.queries):
        _query_cut(cut, f"{field}.queries[{i}]")
    _integer(info.size_bytes, f"{field}.size_bytes")
    _integer(info.bytes_copied, f"{field}.bytes_copied")
    _real(info.duration_ms, f"{field}.duration_ms")
    _real(info.created_at, f"{field}.created_at")
    return info


def _checkpoints(checkpoints: Sequence[CheckpointInfo], field: str) -> None:
    _count(checkpoints, field, limits.MAX_CHECKPOINTS)
    for i, info in enumerate(checkpoints):
        checkpoint(info, f"{field}[{i}]")


def _names(names: Sequence[str], field: str) -> None:
    _count(names, field, limits.MAX_NODES)
    for i, node in enumerate(names):
        name(node, f"{field}[{i}]")


def _graph(nodes: Sequence[PipelineNode]) -> None:
    """Every node named, of a kind that is a name, fed only by nodes of the graph."""
    _count(nodes, "nodes", limits.MAX_NODES)
    for i, node in enumerate(nodes):
        name(node.name, f"nodes[{i}].name")
        name(node.kind, f"nodes[{i}].kind")
        _names(node.inputs, f"nodes[{i}].inputs")
    known = {node.name for node in nodes}
    for i, node in enumerate(nodes):
        for j, source in enumerate(node.inputs):
            if source not in known:
                raise InvalidRequest(f"nodes[{i}].inputs[{j}]: {shown(source)} is not a node of the graph")


def registration(request: Registration) -> Registration:
    name(request.worker_id, "worker_id")
    _token(request.pipeline_fingerprint, "pipeline_fingerprint")
    _names(request.node_names, "node_names")
    _checkpoints(request.checkpoints, "checkpoints")
    _graph(request.nodes)
    if request.session_id:
        _token(request.session_id, "session_id")
    _token(request.fence.volume_id, "fence.volume_id")
    _integer(request.fence.generation, "fence.generation")
    if request.host:
        name(request.host, "host")
    _integer(request.pid, "pid", 0, PID_MAX)
    return request


def standby(request: StandbyReport) -> StandbyReport:
    name(request.worker_id, "worker_id")
    name(request.host, "host")
    _integer(request.pid, "pid", 1, PID_MAX)
    _real(request.started_at, "started_at")
    return request


def _query(query: QueryProgress, field: str) -> QueryProgress:
    name(query.name, f"{field}.name")
    _integer(query.batch_id, f"{field}.batch_id", -1)
    _offsets(query.offsets, f"{field}.offsets")
    _offsets(query.latest_offsets, f"{field}.latest_offsets")
    _integer(query.rows_processed, f"{field}.rows_processed")
    _integer(query.data_losses, f"{field}.data_losses")
    _count(query.late_rows, f"{field}.late_rows", limits.MAX_NODES)
    for node, rows in query.late_rows.items():
        name(node, f"{field}.late_rows")
        _integer(rows, f"{field}.late_rows[{node}]")
    _real(query.rows_per_second, f"{field}.rows_per_second")
    return replace(query, error=clip(query.error, limits.TEXT_MAX))


def _sink(sink: SinkProgress, field: str) -> SinkProgress:
    name(sink.name, f"{field}.name")
    _real(sink.waiting_since, f"{field}.waiting_since")
    _real(sink.next_retry_at, f"{field}.next_retry_at")
    _integer(sink.published_checkpoint_id, f"{field}.published_checkpoint_id", 0, limits.CHECKPOINT_ID_MAX)
    _integer(sink.published_batch_id, f"{field}.published_batch_id", -1)
    _integer(sink.pending_batches, f"{field}.pending_batches")
    _integer(sink.retries, f"{field}.retries")
    return replace(sink, target=clip(sink.target, limits.TEXT_MAX), error=clip(sink.error, limits.TEXT_MAX))


def _savepoint_answer(answer: SavepointAnswer, field: str) -> SavepointAnswer:
    _token(answer.savepoint_id, f"{field}.savepoint_id")
    checkpoint_id(answer.checkpoint_id, f"{field}.checkpoint_id")
    return answer


def _export_answer(answer: ExportAnswer, field: str) -> ExportAnswer:
    _token(answer.savepoint_id, f"{field}.savepoint_id")
    if len(answer.dir) > limits.PATH_MAX:
        raise InvalidRequest(f"{field}.dir: {len(answer.dir)} characters, at most {limits.PATH_MAX}")
    return replace(answer, error=clip(answer.error, limits.TEXT_MAX))


def report(request: ProgressReport) -> ProgressReport:
    """The report with its free text clipped; raises ``InvalidRequest``."""
    name(request.worker_id, "worker_id")
    _token(request.session_id, "session_id")
    _integer(request.seq, "seq")
    _count(request.queries, "queries", limits.MAX_QUERIES)
    _count(request.sinks, "sinks", limits.MAX_QUERIES)
    _count(request.savepoint_answers, "savepoint_answers", limits.MAX_ANSWERS)
    _count(request.exports, "exports", limits.MAX_ANSWERS)
    _integer(request.dropped_checkpoints, "dropped_checkpoints")
    _integer(request.failed_checkpoints, "failed_checkpoints")
    _integer(request.restored_checkpoint_id, "restored_checkpoint_id", 0, limits.CHECKPOINT_ID_MAX)
    _integer(request.recovery.target_bytes, "recovery.target_bytes")
    _integer(request.recovery.replayed_bytes, "recovery.replayed_bytes")
    _real(request.recovery.started_at, "recovery.started_at")
    _real(request.recovery.duration_ms, "recovery.duration_ms")
    _integer(request.restarts.count, "restarts.count")
    _integer(request.restarts.same_in_a_row, "restarts.same_in_a_row")
    _real(request.restarts.last_failed_at, "restarts.last_failed_at")
    _integer(request.checkpoint_volume.used_bytes, "checkpoint_volume.used_bytes")
    _integer(request.checkpoint_volume.free_bytes, "checkpoint_volume.free_bytes")
    _names(request.finished_nodes, "finished_nodes")
    if request.checkpoints is not None:
        _checkpoints(request.checkpoints, "checkpoints")
    return replace(
        request,
        queries=tuple(_query(q, f"queries[{i}]") for i, q in enumerate(request.queries)),
        sinks=tuple(_sink(s, f"sinks[{i}]") for i, s in enumerate(request.sinks)),
        savepoint_answers=tuple(_savepoint_answer(a, f"savepoint_answers[{i}]")
                                for i, a in enumerate(request.savepoint_answers)),
        exports=tuple(_export_answer(a, f"exports[{i}]") for i, a in enumerate(request.exports)),
        checkpoint_error=clip(request.checkpoint_error, limits.TEXT_MAX),
        waiting_for=clip(request.waiting_for, limits.TEXT_MAX),
        restarts=replace(request.restarts, last_error=clip(request.restarts.last_error, limits.TEXT_MAX)),
    )


def commit(worker_id: str, session_id: str, info: CheckpointInfo) -> CheckpointInfo:
    name(worker_id, "worker_id")
    _token(session_id, "session_id")
    return checkpoint(info, "checkpoint")
