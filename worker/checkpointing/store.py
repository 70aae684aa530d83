"""The durable checkpoint store on the worker's volume (``SP_CHECKPOINT_DIR``)::

    LOCK, FENCE, TAKEOVER    which one process writes here (``worker.checkpointing.lock``)
    blobs/ab/abcdef...       file contents, named by SHA-256 (copied once, shared)
    manifests/000000000042.json

Every write goes to a temporary name, is fsynced, renamed into place, and the
directory fsynced: a crash leaves either the old state or the new, never a
torn file under a final name. Every write first checks that this process
still holds the lock (``guard``); a manifest is never replaced: a process
whose lock was broken between its check and its write cannot overwrite the
new holder's checkpoint of the same id.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sparkpoint.fileio import atomic_create, fsync_dir, open_regular, read_regular, sha256_of
from sparkpoint.messages import VolumeFence
from sparkpoint.storelayout import BLOBS, MANIFESTS, manifest_name
from worker.checkpointing.lock import StoreLock, Superseded
from worker.checkpointing.manifest import Manifest, ManifestError

log = logging.getLogger("sparkpoint.worker.checkpoints")

_COPY_CHUNK = 1 << 20
# A manifest lists every file of each query once: 64 MiB is hundreds of thousands of files.
MANIFEST_MAX_BYTES = 64 << 20


class CorruptCheckpoint(ValueError):
    """A checkpoint failed verification; the message names it and the file."""


@dataclass(frozen=True)
class StoredBlob:
    sha256: str
    size: int
    copied: bool


class CheckpointStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.blobs = self.root / BLOBS
        self.manifests_dir = self.root / MANIFESTS
        self.lock = StoreLock(self.root)

    # -- fencing ---------------------------------------------------------
    def acquire(self, owner: str, *, silence_s: float | None = None) -> VolumeFence:
        """Take the store's lock (``StoreLock.acquire``)."""
        return self.lock.acquire(owner, silence_s=silence_s)

    def guard(self) -> None:
        """Before every write: raise ``Superseded`` if this process's lock was
        broken (another process holds the index now)."""
        if (reason := self.lock.lost()) is not None:
            raise Superseded(reason)

    def release(self) -> None:
        self.lock.release()

    # -- blobs -------------------------------------------------------------
    def blob_path(self, sha256: str) -> Path:
        return self.blobs / sha256[:2] / sha256

    def has_blob(self, sha256: str) -> bool:
        return self.blob_path(sha256).exists()

    def put_file(self, source: Path, known_sha256: str | None = None) -> StoredBlob:
        """Store a file's content unless the store already holds it.

        ``known_sha256``: the digest the file had when last stored (it has not
        changed since); its blob is reused if present with the right size.
        """
        if known_sha256 is not None:
            try:
                if self.blob_path(known_sha256).stat().st_size == os.path.getsize(source):
                    return StoredBlob(known_sha256, os.path.getsize(source), False)
            except FileNotFoundError:
                pass
        self.guard()
        self.blobs.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        fd, tmp = tempfile.mkstemp(dir=self.blobs, prefix=".blob.", suffix=".tmp")
        size = 0
        try:
            with open_regular(source) as src, os.fdopen(fd, "wb") as dst:
                while chunk := src.read(_COPY_CHUNK):
                    digest.update(chunk)
                    dst.write(chunk)
                    size += len(chunk)
                dst.flush()
                os.fsync(dst.fileno())
            sha = digest.hexdigest()
            final = self.blob_path(sha)
            existed = final.exists()
            # Even when the blob exists, the fresh copy replaces it: a blob
            # damaged on disk heals instead of spoiling every later checkpoint.
            final.parent.mkdir(exist_ok=True)
            os.replace(tmp, final)
            fsync_dir(final.parent)
            return StoredBlob(sha, size, not existed)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    # -- manifests -----------------------------------------------------------
    def manifest_path(self, checkpoint_id: int) -> Path:
        return self.root / manifest_name(checkpoint_id)

    def write_manifest(self, manifest: Manifest) -> None:
        """The last step of a checkpoint: after this it is durable. A
        different manifest of that id already there is kept
        (``FileExistsError``); the same one again is no change (an export
        repeated)."""
        self.guard()
        path, data = self.manifest_path(manifest.checkpoint_id), manifest.to_json().encode()
        try:
            atomic_create(path, data)
        except FileExistsError:
            if path.read_bytes() != data:
                raise

    def checkpoint_ids(self) -> list[int]:
        """Ids of every manifest file present (readable or not), ascending."""
        if not self.manifests_dir.is_dir():
            return []
        return sorted(int(p.stem) for p in self.manifests_dir.glob("*.json") if p.stem.isdigit())

    def load(self, checkpoint_id: int) -> Manifest:
        path = self.manifest_path(checkpoint_id)
        try:
            text = read_regular(path, MANIFEST_MAX_BYTES).decode()
        except FileNotFoundError:
            raise ManifestError(f"{path}: no such checkpoint") from None
        except (OSError, UnicodeDecodeError) as error:      # a link, a FIFO, a device, too large
            raise ManifestError(f"{path}: cannot be read ({error.strerror if isinstance(error, OSError) else error})") \
                from None
        manifest = Manifest.from_json(text, str(path))
        if manifest.checkpoint_id != checkpoint_id:
            raise ManifestError(f"{path}: holds checkpoint {manifest.checkpoint_id}, not {checkpoint_id}")
        return manifest

    def readable(self) -> tuple[list[Manifest], list[str]]:
        """Manifests that parse, ascending; and one problem line per one that does not."""
        manifests, problems = [], []
        for checkpoint_id in self.checkpoint_ids():
            try:
                manifests.append(self.load(checkpoint_id))
            except ManifestError as error:
                problems.append(str(error))
        return manifests, problems

    def quarantine_unreadable(self) -> list[str]:
        """Move manifests that do not parse to ``quarantine/``; one problem line
        each. Also removes temporary manifests a crash left behind."""
        for stray in self.manifests_dir.glob(".*.tmp") if self.manifests_dir.is_dir() else []:
            stray.unlink(missing_ok=True)
        problems = []
        for checkpoint_id in self.checkpoint_ids():
            try:
                self.load(checkpoint_id)
            except ManifestError as error:
                problems.append(str(error))
                self.quarantine(checkpoint_id)
        return problems

    def verify(self, manifest: Manifest) -> None:
        """Check each query's cut is whole (``QueryCut.missing_files``: a torn
        cut would make Spark start over silently) and every file is present
        with the recorded size and digest."""
        for query in manifest.queries:
            missing = query.missing_files()
            if missing:
                raise CorruptCheckpoint(f"checkpoint {manifest.checkpoint_id}: query {query.name} is a torn cut at "
                                        f"batch {query.batch_id}: it lacks {' and '.join(missing)}")
        for query in manifest.queries:
            for path, entry in query.files.items():
                blob = self.blob_path(entry.sha256)
                name = f"checkpoint {manifest.checkpoint_id}: {query.name}/{path}"
                try:
                    intact = sha256_of(blob, size=entry.size) == entry.sha256
                except FileNotFoundError:
                    raise CorruptCheckpoint(f"{name} is missing from the store ({blob})") from None
                except OSError as error:        # a link, a FIFO, a device, a directory
                    raise CorruptCheckpoint(f"{name} is not a regular file in the store ({blob}: "
                                            f"{error.strerror})") from None
                if not intact:
                    raise CorruptCheckpoint(f"{name} does not match its checksum ({blob})")

    def materialize(self, manifest: Manifest, query_root: Path) -> None:
        """Rebuild each query's working directory from the checkpoint (after verify)."""
        for query in manifest.queries:
            target = query_root / query.name
            if target.exists():
                shutil.rmtree(target)
            for path, entry in query.files.items():
                destination = target / path
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(self.blob_path(entry.sha256), destination)

    def quarantine(self, checkpoint_id: int) -> None:
        """Move a corrupt checkpoint's manifest aside (kept for inspection, out of retention's way)."""
        self.guard()
        source = self.manifest_path(checkpoint_id)
        if source.exists():
            target = self.root / "quarantine" / source.name
            target.parent.mkdir(exist_ok=True)
            source.replace(target)

    def highest_id_ever(self) -> int:
        """The highest id used here, quarantined ones included: new ids go above it."""
        quarantined = [int(p.stem) for p in (self.root / "quarantine").glob("*.json") if p.stem.isdigit()]
        return max(self.checkpoint_ids() + quarantined, default=0)

    def delete(self, checkpoint_id: int) -> None:
        self.guard()
        self.manifest_path(checkpoint_id).unlink(missing_ok=True)

    def delete_blobs(self, digests: set[str]) -> int:
        """Delete these blobs (those of retired checkpoints no kept one
        references); returns bytes freed."""
        self.guard()
        freed = 0
        for digest in digests:
            blob = self.blob_path(digest)
            try:
                freed += blob.stat().st_size
                blob.unlink()
            except FileNotFoundError:
                pass
        return freed

    def collect_garbage(self, referenced: set[str]) -> int:
        """Delete every blob no retained manifest references, listing the
        whole store (what a crash or a failed checkpoint left included);
        returns bytes freed."""
        self.guard()
        freed = 0
        if not self.blobs.is_dir():
            return 0
        for shard in self.blobs.iterdir():
            if not shard.is_dir():
                if shard.name.endswith(".tmp"):     # a copy a crash interrupted
                    freed += shard.stat().st_size
                    shard.unlink(missing_ok=True)
                continue
            for blob in shard.iterdir():
                if blob.name not in referenced:
                    freed += blob.stat().st_size
                    blob.unlink(missing_ok=True)
        return freed
