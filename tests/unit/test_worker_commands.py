"""The worker's side of the controller's commands: each command started once
however often it is repeated, answers repeated until they arrived, pins."""

from __future__ import annotations

from sparkpoint.messages import (
    CheckpointNow,
    Export,
    ExportAnswer,
    ReportOutcome,
    ReportStatus,
    Restart,
    SavepointAnswer,
)
from worker.control.commands import CommandBook, StartExport, TakeCheckpoint


def reply(*commands, pinned=(), status=ReportStatus.ACCEPTED) -> ReportOutcome:
    return ReportOutcome(status, tuple(commands), frozenset(pinned))


def test_a_repeated_checkpoint_request_starts_one_checkpoint():
    book = CommandBook()
    assert book.on_reply(reply(CheckpointNow("sp-000001"))) == [TakeCheckpoint("sp-000001")]
    book.answers()
    assert book.on_reply(reply(CheckpointNow("sp-000001"))) == []      # still being taken


def test_an_answer_is_repeated_until_the_controller_stops_asking():
    book = CommandBook()
    book.on_reply(reply(CheckpointNow("sp-000001")))
    book.checkpoint_taken("sp-000001", 7)
    assert book.answers().savepoints == (SavepointAnswer("sp-000001", 7),)
    # The report carrying it was lost: the controller asks again; nothing new starts.
    assert book.on_reply(reply(CheckpointNow("sp-000001"))) == []
    assert book.answers().savepoints == (SavepointAnswer("sp-000001", 7),)
    book.on_reply(reply())                                             # it arrived
    assert book.answers().savepoints == ()


def test_an_answer_given_after_the_report_was_built_is_not_dropped():
    book = CommandBook()
    book.on_reply(reply(CheckpointNow("sp-000001")))
    book.answers()                                                      # built before the answer
    book.checkpoint_taken("sp-000001", 7)
    book.on_reply(reply())
    assert book.answers().savepoints == (SavepointAnswer("sp-000001", 7),)


def test_an_ignored_report_delivers_nothing():
    book = CommandBook()
    book.on_reply(reply(CheckpointNow("sp-000001")))
    book.checkpoint_taken("sp-000001", 7)
    book.answers()
    assert book.on_reply(reply(status=ReportStatus.STALE)) == []
    assert book.answers().savepoints == (SavepointAnswer("sp-000001", 7),)


def test_pins_are_the_controllers_plus_answers_in_flight():
    book = CommandBook()
    book.on_reply(reply(CheckpointNow("sp-000002"), pinned=[3]))
    book.checkpoint_taken("sp-000002", 9)
    assert book.pinned() == {3, 9}
    book.answers()
    book.on_reply(reply(pinned=[3, 9]))
    assert book.pinned() == {3, 9}
    book.answers()
    book.on_reply(reply(pinned=[9]))                                    # savepoint 1 disposed
    assert book.pinned() == {9}


def test_an_export_starts_once_and_its_answer_is_repeated_until_it_arrived():
    book = CommandBook()
    export = Export("sp-000001", 4, "nightly/worker-0")
    assert book.on_reply(reply(export)) == [StartExport(export)]
    assert book.on_reply(reply(export)) == []                           # still being written
    assert book.answers().exports == ()
    book.export_done(export, "No space left on device")
    assert book.answers().exports == (ExportAnswer("sp-000001", "nightly/worker-0", "No space left on device"),)
    book.on_reply(reply())
    assert book.answers().exports == ()


def test_a_restart_is_passed_on():
    assert CommandBook().on_reply(reply(Restart())) == [Restart()]


# --- CommandExecutor: exports -----------------------------------------------------------------

def stored_checkpoint(tmp_path):
    from worker.checkpointing.manifest import FileEntry, Manifest, QueryCut
    from worker.checkpointing.store import CheckpointStore

    store = CheckpointStore(tmp_path / "checkpoints")
    files = {}
    for path, content in (("metadata", b'{"id":"q"}'), ("offsets/0", b"v1\n{}\n{}")):
        source = tmp_path / path.replace("/", "-")
        source.write_bytes(content)
        blob = store.put_file(source)
        files[path] = FileEntry(blob.sha256, blob.size)
    store.write_manifest(Manifest(4, "worker-0", 1.0, 1.0, sum(e.size for e in files.values()), ("src",), (
        QueryCut("out", 0, {"0": 10}, files),)))
    return store


def executor_for(tmp_path):
    from worker.control.actions import CommandExecutor
    from worker.settings import WorkerSettings

    settings = WorkerSettings.from_env({"SP_SAVEPOINT_DIR": str(tmp_path / "savepoints")})
    return CommandExecutor(CommandBook(), stored_checkpoint(tmp_path), settings)


def test_an_export_writes_a_checkpoint_store_under_the_savepoint_root_and_answers(tmp_path):
    from worker.checkpointing.store import CheckpointStore

    executor = executor_for(tmp_path)
    export = Export("sp-000001", 4, "nightly/worker-0")
    executor.export(export)
    assert executor.book.answers().exports == (ExportAnswer("sp-000001", "nightly/worker-0", ""),)
    exported = CheckpointStore(tmp_path / "savepoints" / "nightly" / "worker-0")
    exported.verify(exported.load(4))


def test_an_export_outside_the_savepoint_root_is_answered_with_the_refusal(tmp_path):
    executor = executor_for(tmp_path)
    export = Export("sp-000001", 4, "../escaped")
    executor.export(export)
    [answer] = executor.book.answers().exports
    assert "'..' is not allowed" in answer.error
    assert not (tmp_path / "escaped").exists()
