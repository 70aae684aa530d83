"""Issue 15's checkpoint findings as regression tests: a manifest (in the
store, or an exported savepoint's) that names files outside its query's
directory, or blobs by anything but a SHA-256, is refused as it is read,
with nothing written anywhere; a torn cut (no ``metadata``, or no
``offsets/N`` of its batch) is refused at verification, named, and the
restore falls back, never below a published checkpoint."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests.unit.test_checkpoint_writer_restore import LAYOUT, FakeQuery
from worker.checkpointing.manifest import FileEntry, Manifest, ManifestError
from worker.checkpointing.store import CheckpointStore, CorruptCheckpoint
from worker.checkpointing.transfer import import_checkpoint
from worker.checkpointing.writer import CheckpointWriter, TornCut
from worker.stateplan.restore import RestoreRefused, restore

CONTENT = b"escaped!"
SHA = hashlib.sha256(CONTENT).hexdigest()


def manifest_json(files: dict[str, dict], name: str = "counts", batch_id: int = 0) -> str:
    return json.dumps({"format_version": 1, "checkpoint_id": 1, "worker_id": "w0", "created_at": 1.0,
                       "duration_ms": 1.0, "bytes_copied": 0, "node_names": ["src", "counts"],
                       "queries": [{"name": name, "batch_id": batch_id, "offsets": {"0": 1}, "files": files}]})


def whole(extra: dict[str, dict] | None = None) -> dict[str, dict]:
    entry = {"sha256": SHA, "size": len(CONTENT)}
    return {"metadata": entry, "offsets/0": entry, **(extra or {})}


@pytest.mark.parametrize("path", [
    "../../escaped", "/tmp/escaped", "state/../../../escaped", "./metadata", "state//0", "offsets/", "",
    "a\x00b", "a\nb", "n" * 256, "..", "state/0/..",
])
def test_a_file_path_outside_the_query_directory_is_refused_when_read(path):
    with pytest.raises(ManifestError, match="names a file outside its query's directory"):
        Manifest.from_json(manifest_json(whole({path: {"sha256": SHA, "size": 8}})), "m.json")


@pytest.mark.parametrize("name", ["..", "../counts", "a/b", "/abs", "", "x" * 65])
def test_a_query_name_that_is_not_a_plain_name_is_refused(name):
    with pytest.raises(ManifestError, match="is not a plain name"):
        Manifest.from_json(manifest_json(whole(), name=name), "m.json")


@pytest.mark.parametrize("sha256", [SHA.upper(), SHA[:-1], SHA + "0", "../../" + SHA[6:], "g" * 64, 7])
def test_a_digest_that_is_not_64_lowercase_hex_digits_is_refused(sha256):
    with pytest.raises(ManifestError, match="is not 64 lowercase hex digits"):
        Manifest.from_json(manifest_json({"metadata": {"sha256": sha256, "size": 1}}), "m.json")


def test_a_plain_manifest_still_reads():
    manifest = Manifest.from_json(manifest_json(whole({"state/0/1/2.delta": {"sha256": SHA, "size": 8}})), "m")
    assert set(manifest.queries[0].files) == {"metadata", "offsets/0", "state/0/1/2.delta"}


def exported_with(tmp_path: Path, files: dict[str, dict]) -> Path:
    """An exported checkpoint store (another deployment's) holding CONTENT and a crafted manifest."""
    exported = tmp_path / "savepoints" / "evil" / "worker-0"
    blob = exported / "blobs" / SHA[:2] / SHA
    blob.parent.mkdir(parents=True)
    blob.write_bytes(CONTENT)
    (exported / "manifests").mkdir()
    (exported / "manifests" / f"{1:012d}.json").write_text(manifest_json(files))
    return exported


def everything_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


@pytest.mark.parametrize("path", ["../../escaped", "/ABS/escaped", "../../../../escaped"])
def test_an_imported_savepoint_naming_files_outside_writes_nothing(tmp_path, path):
    absolute = path.replace("/ABS", str(tmp_path))
    exported = exported_with(tmp_path, whole({absolute: {"sha256": SHA, "size": len(CONTENT)}}))
    before = everything_under(tmp_path)
    store = CheckpointStore(tmp_path / "store")
    with pytest.raises(ManifestError, match="names a file outside"):
        import_checkpoint(exported, 1, store, new_id=5)
    assert everything_under(tmp_path) == before          # not a file written, not even the store


def test_a_stored_manifest_naming_files_outside_is_quarantined_and_nothing_is_written(tmp_path):

    store = CheckpointStore(tmp_path / "store")
    source = tmp_path / "content"
    source.write_bytes(CONTENT)
    store.put_file(source)
    store.manifests_dir.mkdir(parents=True)
    store.manifest_path(1).write_text(manifest_json(whole({"../../escaped": {"sha256": SHA, "size": 8}})))
    query_root = tmp_path / "run" / "queries"
    outcome = restore(store, 1, query_root, LAYOUT)
    assert outcome.manifest is None and "names a file outside" in outcome.corrupt[0]
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "run" / "escaped").exists()
    assert not query_root.exists() or list(query_root.iterdir()) == []
    assert store.checkpoint_ids() == []                 # quarantined


# --- torn cuts -------------------------------------------------------------------------------

@pytest.fixture
def store(tmp_path) -> CheckpointStore:
    return CheckpointStore(tmp_path / "checkpoints")


@pytest.fixture
def three(store, tmp_path):
    """Checkpoints 1, 2, 3 of query counts at batches 1, 2, 3 (a fake Spark directory)."""

    query_root = tmp_path / "run" / "queries"
    writer = CheckpointWriter(store, query_root, "w0", LAYOUT.node_names, "fp-1", clock=lambda: 1.0,
                              layouts=LAYOUT.queries)
    query = FakeQuery(query_root)
    query.batch(0)
    for checkpoint_id in (1, 2, 3):
        query.batch(checkpoint_id)
        writer.take(checkpoint_id)
    return store


def tear(store: CheckpointStore, checkpoint_id: int, lose: str) -> None:
    """Rewrite a durable checkpoint's manifest without one of its files."""
    manifest = store.load(checkpoint_id)
    [cut] = manifest.queries
    path = lose.replace("N", str(cut.batch_id))
    files = {p: e for p, e in cut.files.items() if p != path}
    store.manifest_path(checkpoint_id).write_text(replace(manifest, queries=(replace(cut, files=files),)).to_json())


@pytest.mark.parametrize("lose", ["metadata", "offsets/N"])
def test_a_torn_cut_is_refused_at_verification_naming_what_it_lacks(three, lose):
    tear(three, 3, lose)
    with pytest.raises(CorruptCheckpoint) as refused:
        three.verify(three.load(3))
    assert str(refused.value) == (f"checkpoint 3: query counts is a torn cut at batch 3: it lacks "
                                  f"{lose.replace('N', '3')}")


def test_a_restore_falls_back_past_torn_cuts(three, tmp_path):

    tear(three, 3, "metadata")
    tear(three, 2, "offsets/N")
    outcome = restore(three, 3, tmp_path / "fresh" / "queries", LAYOUT, floor=1)
    assert outcome.manifest.checkpoint_id == 1
    assert [line.split(":")[0] for line in outcome.corrupt] == ["checkpoint 3", "checkpoint 2"]
    assert all("torn cut" in line for line in outcome.corrupt)
    assert {"metadata", "offsets/1"} <= set((p.relative_to(tmp_path / "fresh" / "queries" / "counts").as_posix()
                                            for p in (tmp_path / "fresh" / "queries" / "counts").rglob("*")))


def test_a_torn_published_checkpoint_is_refused_never_replayed_from_zero(three, tmp_path):

    tear(three, 3, "offsets/N")
    with pytest.raises(RestoreRefused) as refused:
        restore(three, 3, tmp_path / "fresh" / "queries", LAYOUT, floor=3)
    assert "a sink already published output up to checkpoint 3" in str(refused.value)
    assert "torn cut at batch 3: it lacks offsets/3" in str(refused.value)
    assert not (tmp_path / "fresh").exists()


def test_the_writer_refuses_to_write_a_torn_cut(store, tmp_path):

    query_root = tmp_path / "run" / "queries"
    query = FakeQuery(query_root)
    query.batch(0)
    (query.dir / "metadata").unlink()
    writer = CheckpointWriter(store, query_root, "w0", LAYOUT.node_names, "fp-1", layouts=LAYOUT.queries)
    with pytest.raises(TornCut, match="query counts at batch 0 lacks metadata"):
        writer.take(1)
    assert store.checkpoint_ids() == []


def test_file_entries_built_by_the_writer_pass_their_own_reading(three):
    for checkpoint_id in (1, 2, 3):
        manifest = three.load(checkpoint_id)
        assert all(isinstance(entry, FileEntry) for entry in manifest.queries[0].files.values())
        three.verify(manifest)
