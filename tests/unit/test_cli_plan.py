"""``sparkpoint plan`` against checkpoint directories and pipeline files on
disk. The stateful nodes' columns come from a fake instead of Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkpoint_cli import main
from tests.unit.plan_support import SCHEMAS, take_checkpoint, write_pipeline
from worker.checkpointing.layout import Column, StateSchema
from worker.checkpointing.store import CheckpointStore


def run(*argv: str, derive=lambda pipeline: SCHEMAS) -> int:
    with pytest.raises(SystemExit) as exited:
        main(list(argv), derive=derive)
    return exited.value.code


@pytest.fixture
def original(tmp_path) -> Path:
    return write_pipeline(tmp_path / "original.py")


@pytest.fixture
def checkpoints(tmp_path, original) -> Path:
    take_checkpoint(tmp_path / "checkpoints", original)
    return tmp_path / "checkpoints"


def test_an_unchanged_pipeline_would_be_restored(checkpoints, original, capsys):
    assert run("plan", "--pipeline", str(original), "--from", str(checkpoints)) == 0
    out = capsys.readouterr().out
    assert out.startswith("Checkpoint 5 of worker-0 (taken 2023-11-14 22:13:20 UTC, pipeline ")
    table = out.splitlines()[2:6]
    assert table[0].split() == ["NODE", "ACTION", "STATE", "DETAIL"]
    assert table[2].split() == ["vwap_state", "keep", "vwap_out/state/0", "same", "key", "and", "value", "columns"]
    assert "vwap_out  continues after batch 41" in out
    assert out.rstrip().endswith("Restore would go ahead: 3 kept, 0 fresh, 0 dropped.")


def test_a_new_branch_and_a_renamed_node_are_shown_node_by_node(checkpoints, tmp_path, capsys):
    changed = write_pipeline(tmp_path / "changed.py", '"vwap_state_v2"', extra="""
            trades | sp.aggregate("sym", {"n": "count(1)"}, name="counts") | sp.write.to_files("c", name="counts_out"),""")
    schemas = {**SCHEMAS, "vwap_state_v2": SCHEMAS["vwap_state"]}
    assert run("plan", "--pipeline", str(changed), "--from", str(checkpoints), derive=lambda p: schemas) == 0
    rows = {line.split()[0]: line.split()[1:3] for line in capsys.readouterr().out.splitlines()[3:9]}
    assert rows["vwap_state_v2"] == ["fresh", "vwap_out/state/0"]
    assert rows["counts"] == ["fresh", "counts_out/state/0"]
    assert rows["vwap_state"] == ["drop", "vwap_out/state/0"]


def test_a_changed_state_is_refused_with_exit_status_2(checkpoints, original, capsys):
    wider = {"vwap_state": StateSchema((Column("sym", "string"), Column("venue", "string")),
                                       SCHEMAS["vwap_state"].value)}
    assert run("plan", "--pipeline", str(original), "--from", str(checkpoints), derive=lambda p: wider) == 2
    out = capsys.readouterr().out
    assert "Restore refused:\n  - vwap_state: key changed from (sym string) to (sym string, venue string)" in out


def test_a_manifest_file_and_a_chosen_checkpoint_id_can_be_planned(checkpoints, original, capsys):
    take_checkpoint(checkpoints, original, checkpoint_id=7)
    assert run("plan", "--pipeline", str(original), "--from", str(checkpoints), "--checkpoint", "5") == 0
    assert capsys.readouterr().out.startswith("Checkpoint 5 ")
    manifest = CheckpointStore(checkpoints).manifest_path(7)
    assert run("plan", "--pipeline", str(original), "--from", str(manifest)) == 0
    assert capsys.readouterr().out.startswith("Checkpoint 7 ")


def test_finished_nodes_follow_sp_force_graph_change_unless_told_otherwise(tmp_path, original, capsys, monkeypatch):
    take_checkpoint(tmp_path / "finished", original, finished=("trades",))
    changed = write_pipeline(tmp_path / "changed.py", '"vwap_state_v2"')
    schemas = {"vwap_state_v2": SCHEMAS["vwap_state"]}
    argv = ("plan", "--pipeline", str(changed), "--from", str(tmp_path / "finished"))
    assert run(*argv, derive=lambda p: schemas) == 2
    assert "set SP_FORCE_GRAPH_CHANGE=true to restore anyway" in capsys.readouterr().out
    monkeypatch.setenv("SP_FORCE_GRAPH_CHANGE", "true")
    assert run(*argv, derive=lambda p: schemas) == 0
    assert "warning: the checkpoint holds finished nodes (trades)" in capsys.readouterr().out
    assert run(*argv, "--no-force", derive=lambda p: schemas) == 2


@pytest.mark.parametrize(("argv", "message"), [
    (("--from", "{tmp}/nowhere"), "sparkpoint: error: --from {tmp}/nowhere: no such file or directory"),
    (("--from", "{tmp}"), "sparkpoint: error: --from {tmp}: no checkpoint manifests in it (expected a worker's "
                          "SP_CHECKPOINT_DIR or a manifest file)"),
    (("--from", "{tmp}/checkpoints", "--checkpoint", "9"),
     "sparkpoint: error: --checkpoint 9: not in {tmp}/checkpoints (it holds 5..5)"),
    (("--from", "{tmp}/original.py"), "sparkpoint: error: {tmp}/original.py: not a valid checkpoint manifest"),
])
def test_missing_or_wrong_inputs_are_one_line_errors_with_exit_status_1(argv, message, checkpoints, original,
                                                                        tmp_path, capsys):
    assert run("plan", "--pipeline", str(original), *(a.format(tmp=tmp_path) for a in argv)) == 1
    err = capsys.readouterr().err
    assert err.startswith(message.format(tmp=tmp_path)) and err.count("\n") == 1


def test_a_missing_pipeline_file_is_a_one_line_error(checkpoints, tmp_path, capsys):
    assert run("plan", "--pipeline", str(tmp_path / "gone.py"), "--from", str(checkpoints)) == 1
    assert capsys.readouterr().err == f"sparkpoint: error: {tmp_path}/gone.py: pipeline file does not exist\n"


def test_bad_usage_exits_1_not_2_which_means_refused(capsys):
    assert run("plan", "--pipeline", "p.py") == 1
    assert capsys.readouterr().err.splitlines()[-1] == "sparkpoint plan: error: Missing option '--from'."


def test_a_bad_sp_force_graph_change_is_named(checkpoints, original, capsys, monkeypatch):
    monkeypatch.setenv("SP_FORCE_GRAPH_CHANGE", "maybe")
    assert run("plan", "--pipeline", str(original), "--from", str(checkpoints)) == 1
    assert capsys.readouterr().err == "sparkpoint: error: SP_FORCE_GRAPH_CHANGE: expected true or false, got 'maybe'\n"
