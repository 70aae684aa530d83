"""Copying one checkpoint between stores: a savepoint's export (to a
directory another deployment can import) and its import.

An exported checkpoint is a checkpoint store of its own (``blobs/``,
``manifests/<id>.json``) holding that one checkpoint; its manifest is
written last, so a directory without it is an export that did not finish.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from worker.checkpointing.manifest import Manifest
from worker.checkpointing.store import CheckpointStore


def _copy(source: CheckpointStore, manifest: Manifest, target: CheckpointStore) -> None:
    """Verify ``manifest`` in ``source``, then copy its files into ``target`` (fsynced)."""
    source.verify(manifest)
    for digest in sorted(manifest.digests()):
        target.put_file(source.blob_path(digest), digest)


def export_checkpoint(store: CheckpointStore, checkpoint_id: int, directory: Path) -> Manifest:
    """Write checkpoint ``checkpoint_id`` of ``store`` to ``directory`` as a
    self-contained store. Raises ``ManifestError`` or ``CorruptCheckpoint``."""
    manifest = store.load(checkpoint_id)
    exported = CheckpointStore(directory)
    _copy(store, manifest, exported)
    exported.write_manifest(manifest)
    return manifest


def import_checkpoint(directory: Path, checkpoint_id: int, store: CheckpointStore, new_id: int) -> Manifest:
    """Copy checkpoint ``checkpoint_id`` of the exported store ``directory``
    into ``store`` as checkpoint ``new_id`` (ids only grow in a store), after
    verifying every file. Raises ``ManifestError`` or ``CorruptCheckpoint``."""
    exported = CheckpointStore(directory)
    manifest = exported.load(checkpoint_id)
    _copy(exported, manifest, store)
    imported = replace(manifest, checkpoint_id=new_id)
    store.write_manifest(imported)
    return imported
