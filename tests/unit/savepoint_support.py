"""Two workers as the controller core sees them, for savepoint tests of the
service, REST and the CLI."""

from __future__ import annotations

from pathlib import Path

from controller.savepoints.model import SavepointState
from sparkpoint.messages import (
    CheckpointInfo,
    Export,
    ExportAnswer,
    ProgressReport,
    Registration,
    ReportStatus,
    RestoreDecision,
    SavepointAnswer,
    SinkProgress,
    WorkerState,
)


class Pipeline:
    """Two workers as the controller sees them: registrations, reports, commits."""

    def __init__(self, service, fingerprint: str = "fp-1") -> None:
        self.service = service
        self.fingerprint = fingerprint
        self.sessions: dict[int, str] = {}
        self.seq = 0
        self.sinks: dict[int, tuple[SinkProgress, ...]] = {}

    def register(self, index: int, held: tuple[int, ...] = ()) -> RestoreDecision:
        """Worker ``index`` registers (again: the same process, continuing its session)."""
        result = self.service.register(Registration(
            f"w{index}", index, 2, self.fingerprint, ("src", "out"),
            tuple(CheckpointInfo(checkpoint_id) for checkpoint_id in held), session_id=self.sessions.get(index, "")))
        self.sessions[index] = result.session_id
        return result.restore

    def report(self, index: int, answers: dict[str, int] | None = None, exports: tuple[ExportAnswer, ...] = ()):
        self.seq += 1
        outcome = self.service.report_progress(ProgressReport(
            f"w{index}", self.sessions[index], self.seq, WorkerState.RUNNING, sinks=self.sinks.get(index, ()),
            savepoint_answers=tuple(SavepointAnswer(s, c) for s, c in (answers or {}).items()), exports=exports))
        assert outcome.status is ReportStatus.ACCEPTED
        return outcome

    def commit(self, index: int, checkpoint_id: int) -> None:
        self.service.commit_checkpoint(f"w{index}", CheckpointInfo(checkpoint_id), self.sessions[index])


def running_pipeline(service) -> Pipeline:
    """Both workers registered, with checkpoints 4 and 9 committed."""
    pipeline = Pipeline(service)
    for index, checkpoint in ((0, 4), (1, 9)):
        pipeline.register(index)
        pipeline.commit(index, checkpoint)
    return pipeline


def take(pipeline: Pipeline, label: str = "before v2") -> str:
    """A complete savepoint: the workers answer with new checkpoints 5 and 10 and commit them."""
    savepoint_id = pipeline.service.trigger_savepoint(label).id
    for index, checkpoint in ((0, 5), (1, 10)):
        pipeline.report(index, {savepoint_id: checkpoint})
        pipeline.commit(index, checkpoint)
    assert pipeline.service.savepoint(savepoint_id).state is SavepointState.COMPLETE
    return savepoint_id


def write_part(root: Path, command: Export) -> None:
    """What a worker writes for an export (its manifest is all the controller checks)."""
    manifests = root / command.dir / "manifests"
    manifests.mkdir(parents=True)
    (manifests / f"{command.checkpoint_id:012d}.json").write_text("{}")


def export(pipeline: Pipeline, root: Path, savepoint_id: str) -> None:
    """Export to exports/one, each worker writing its part as told."""
    pipeline.service.export_savepoint(savepoint_id, "exports/one")
    for index in (0, 1):
        [command] = pipeline.report(index).commands
        write_part(root, command)
        pipeline.report(index, exports=(ExportAnswer(savepoint_id, command.dir),))
