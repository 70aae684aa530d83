"""The durable, content-addressed checkpoint store on a tmp directory:
blobs, manifests, verification, quarantine, garbage collection, fencing."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkpoint.messages import VolumeFence
from worker.checkpointing.lock import FenceError
from worker.checkpointing.manifest import FileEntry, Manifest, ManifestError, QueryCut
from worker.checkpointing.store import CheckpointStore, CorruptCheckpoint

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(tmp_path) -> CheckpointStore:
    return CheckpointStore(tmp_path / "store")


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def checkpoint(store: CheckpointStore, src: Path, checkpoint_id: int, files: dict[str, bytes]) -> Manifest:
    """Store ``files`` (path -> content) as checkpoint ``checkpoint_id`` of query ``q``."""
    entries = {}
    for path, data in files.items():
        blob = store.put_file(write(src / f"{checkpoint_id}" / path, data))
        entries[path] = FileEntry(blob.sha256, blob.size)
    manifest = Manifest(checkpoint_id=checkpoint_id, worker_id="w0", created_at=1700000000.5, duration_ms=12.5,
                        bytes_copied=sum(len(d) for d in files.values()), node_names=("src", "out"),
                        queries=(QueryCut("q", 3, {"0": 120, "1": 64}, entries),), pipeline_fingerprint="fp")
    store.write_manifest(manifest)
    return manifest


def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[0] ^= 0xFF
    path.write_bytes(bytes(data))


# --- blobs ------------------------------------------------------------------------------

def test_put_file_stores_content_under_its_sha256(store, tmp_path):
    content = b"v1\n{}\n{\"0\":120}"
    blob = store.put_file(write(tmp_path / "offsets" / "3", content))
    assert blob.sha256 == hashlib.sha256(content).hexdigest()
    assert (blob.size, blob.copied) == (len(content), True)
    assert store.blob_path(blob.sha256).read_bytes() == content


def test_putting_the_same_content_again_copies_nothing(store, tmp_path):
    first = store.put_file(write(tmp_path / "a", b"same bytes"))
    second = store.put_file(write(tmp_path / "b", b"same bytes"))
    known = store.put_file(tmp_path / "b", known_sha256=first.sha256)
    assert (second.sha256, second.copied) == (first.sha256, False)
    assert (known.sha256, known.copied) == (first.sha256, False)
    assert [p for p in store.blobs.rglob("*") if p.is_file()] == [store.blob_path(first.sha256)]


def test_identity_is_content_not_name(store, tmp_path):
    old = store.put_file(write(tmp_path / "run1" / "offsets" / "4", b"v1\n{}\n{\"0\":100}"))
    new = store.put_file(write(tmp_path / "run2" / "offsets" / "4", b"v1\n{}\n{\"0\":200}"))
    assert old.sha256 != new.sha256
    assert new.copied
    assert store.blob_path(old.sha256).read_bytes().endswith(b"100}")
    assert store.blob_path(new.sha256).read_bytes().endswith(b"200}")


# --- manifests --------------------------------------------------------------------------

def test_manifest_round_trip(store, tmp_path):
    manifest = checkpoint(store, tmp_path / "src", 7, {"metadata": b"{}", "offsets/3": b"v1\n{}\n{}"})
    assert store.load(7) == manifest
    assert store.checkpoint_ids() == [7]
    assert store.manifest_path(7).name == "000000000007.json"


def test_loading_a_truncated_manifest_names_the_file(store, tmp_path):
    checkpoint(store, tmp_path / "src", 2, {"metadata": b"{}"})
    path = store.manifest_path(2)
    path.write_bytes(path.read_bytes()[:40])
    with pytest.raises(ManifestError) as raised:
        store.load(2)
    assert str(path) in str(raised.value)


def test_loading_a_missing_checkpoint_names_the_file(store):
    with pytest.raises(ManifestError, match="000000000009.json"):
        store.load(9)


def test_readable_reports_unreadable_manifests_as_problems(store, tmp_path):
    for checkpoint_id in (1, 2, 3):
        checkpoint(store, tmp_path / "src", checkpoint_id, {"metadata": f"{checkpoint_id}".encode()})
    store.manifest_path(2).write_text('{"checkpoint_id": 2, "wor')
    manifests, problems = store.readable()
    assert [m.checkpoint_id for m in manifests] == [1, 3]
    assert len(problems) == 1
    assert str(store.manifest_path(2)) in problems[0]


# --- verify and materialize -------------------------------------------------------------

FILES = {"metadata": b'{"id":"9b0c"}', "offsets/3": b'v1\n{}\n{"0":120}', "state/0/0/4.delta": bytes(range(256))}


def test_verify_passes_on_an_intact_checkpoint(store, tmp_path):
    store.verify(checkpoint(store, tmp_path / "src", 5, FILES))


def test_verify_names_checkpoint_and_file_when_a_blob_has_a_flipped_byte(store, tmp_path):
    manifest = checkpoint(store, tmp_path / "src", 5, FILES)
    flip_a_byte(store.blob_path(manifest.queries[0].files["offsets/3"].sha256))
    with pytest.raises(CorruptCheckpoint) as raised:
        store.verify(manifest)
    assert "checkpoint 5" in str(raised.value)
    assert "q/offsets/3" in str(raised.value)


def test_verify_names_checkpoint_and_file_when_a_blob_is_missing(store, tmp_path):
    manifest = checkpoint(store, tmp_path / "src", 5, FILES)
    store.blob_path(manifest.queries[0].files["state/0/0/4.delta"].sha256).unlink()
    with pytest.raises(CorruptCheckpoint) as raised:
        store.verify(manifest)
    assert "checkpoint 5" in str(raised.value)
    assert "q/state/0/0/4.delta" in str(raised.value)


def test_materialize_rebuilds_the_files_byte_for_byte(store, tmp_path):
    manifest = checkpoint(store, tmp_path / "src", 5, FILES)
    target = tmp_path / "restored"
    write(target / "q" / "offsets" / "9", b"left over from a previous run")
    store.materialize(manifest, target)
    restored = {p.relative_to(target / "q").as_posix(): p.read_bytes()
                for p in (target / "q").rglob("*") if p.is_file()}
    assert restored == FILES


# --- quarantine and garbage collection --------------------------------------------------

def test_quarantine_moves_the_manifest_aside_but_its_id_stays_used(store, tmp_path):
    checkpoint(store, tmp_path / "src", 1, {"metadata": b"1"})
    checkpoint(store, tmp_path / "src", 2, {"metadata": b"2"})
    store.quarantine(2)
    assert store.checkpoint_ids() == [1]
    assert (store.root / "quarantine" / "000000000002.json").exists()
    assert store.highest_id_ever() == 2


def test_highest_id_ever_of_an_empty_store_is_zero(store):
    assert store.highest_id_ever() == 0


def test_garbage_collection_deletes_only_unreferenced_blobs(store, tmp_path):
    kept = checkpoint(store, tmp_path / "src", 2, {"metadata": b"shared", "offsets/3": b"kept"})
    old = checkpoint(store, tmp_path / "src", 1, {"metadata": b"shared", "offsets/2": b"old content"})
    store.delete(old.checkpoint_id)
    freed = store.collect_garbage(kept.digests())
    assert freed == len(b"old content")
    assert not store.has_blob(old.queries[0].files["offsets/2"].sha256)
    store.verify(kept)


def test_garbage_collection_removes_stray_temporary_copies(store, tmp_path):
    kept = checkpoint(store, tmp_path / "src", 1, {"metadata": b"m", "offsets/3": b"o"})
    stray = write(store.blobs / ".blob.x1y2.tmp", b"half a copy a crash interrupted")
    store.collect_garbage(kept.digests())
    assert not stray.exists()
    store.verify(kept)


# --- fencing -------------------------------------------------------------------------------

def test_a_second_store_on_the_same_directory_is_fenced(tmp_path):
    first, second = CheckpointStore(tmp_path / "store"), CheckpointStore(tmp_path / "store")
    first.acquire("worker-0 old container")
    try:
        with pytest.raises(FenceError) as raised:
            second.acquire("worker-0 new container")
        message = str(raised.value)
        assert str(tmp_path / "store") in message
        assert "worker-0 old container" in message
    finally:
        first.release()
    second.acquire("worker-0 new container")
    second.release()


def test_a_store_locked_by_another_process_is_fenced(tmp_path):
    root = tmp_path / "store"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys\n"
         "from worker.checkpointing.store import CheckpointStore\n"
         f"CheckpointStore({str(root)!r}).acquire('worker-7 elsewhere')\n"
         "print('locked', flush=True)\n"
         "sys.stdin.read()\n"],
        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout.readline().strip() == "locked"
        store = CheckpointStore(root)
        with pytest.raises(FenceError, match="worker-7 elsewhere"):
            store.acquire("worker-7")
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)
    store.acquire("worker-7")   # the holder is gone: its lock went with it
    store.release()


def test_each_taking_of_the_lock_counts_one_generation_of_the_volumes_fence(tmp_path):
    root = tmp_path / "store"
    holder = CheckpointStore(root)
    first = holder.acquire("worker-0")
    assert len(first.volume_id) == 32 and first.generation == 1
    with pytest.raises(FenceError):
        CheckpointStore(root).acquire("worker-0 again")     # refused: counts nothing
    holder.release()                                        # as when its process ends
    store = CheckpointStore(root)
    assert store.acquire("worker-0 restarted") == VolumeFence(first.volume_id, 2)
    assert (root / "FENCE").read_text() == f"{first.volume_id} 2\n"
    store.release()
    (root / "FENCE").write_text("torn")
    fresh = CheckpointStore(root).acquire("worker-0")
    assert fresh.volume_id != first.volume_id and fresh.generation == 1     # proves nothing: a new id


def test_a_fence_that_cannot_be_counted_is_no_fence_and_the_store_still_locked(tmp_path, monkeypatch, caplog):
    import errno

    from worker.checkpointing import lock as lock_module

    def full(path, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(lock_module, "atomic_write", full)
    store = CheckpointStore(tmp_path / "store")
    assert store.acquire("worker-0") == VolumeFence()      # the controller waits out the silence instead
    assert "registering without a fence" in caplog.text
    with pytest.raises(FenceError):
        CheckpointStore(tmp_path / "store").acquire("worker-0 again")
    store.release()
