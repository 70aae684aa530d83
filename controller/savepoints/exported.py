"""Exported savepoints on disk, under the savepoint root (``SP_SAVEPOINT_DIR``)
that the controller and every worker mount::

    <path>/worker-<i>/manifests/<checkpoint:012d>.json   worker i's checkpoint, written by worker i
    <path>/worker-<i>/blobs/<sha[:2]>/<sha>              its files (checkpoint-store layout)
    <path>/savepoint.json                                the savepoint's record, written last by
                                                         the controller: the export's commit point

Every path read or written here goes through ``resolve_under_root``: nothing
outside the root is touched, whatever the user or an exported record says.
"""

from __future__ import annotations

from pathlib import Path

from controller.savepoints.exports import worker_dir
from controller.savepoints.model import (
    Savepoint,
    SavepointConflict,
    SavepointRecordError,
    SavepointState,
    from_json,
    to_json,
)
from sparkpoint.errors import shown
from sparkpoint.fileio import atomic_write, read_regular
from sparkpoint.paths import resolve_under_root
from sparkpoint.storelayout import manifest_name

RECORD_FILE = "savepoint.json"
# A record names one checkpoint per worker: a few kilobytes.
RECORD_MAX_BYTES = 1 << 20


class ExportTargetNotEmpty(SavepointConflict):
    pass


class NoSuchExport(SavepointRecordError):
    """There is no exported savepoint at the path (REST 404)."""


class ExportedSavepoints:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def _relative(self, resolved: Path) -> str:
        return resolved.relative_to(self.root.resolve()).as_posix()

    def claim(self, user_path: str) -> str:
        """Create the export's directory (which must not exist or be empty);
        returns its path relative to the root, through any links resolved."""
        target = resolve_under_root(self.root, user_path)
        if target.exists() and (not target.is_dir() or any(target.iterdir())):
            raise ExportTargetNotEmpty(f"{shown(user_path)} already exists and is not an empty directory: export to "
                                       "a new path (an export is never written over another)")
        target.mkdir(parents=True, exist_ok=True)
        return self._relative(target)

    def commit(self, path: str, savepoint: Savepoint) -> None:
        """Write the record of a savepoint whose every part is written under ``path``."""
        atomic_write(resolve_under_root(self.root, f"{path}/{RECORD_FILE}", max_depth=None),
                     to_json(savepoint).encode())

    def read(self, user_path: str) -> tuple[str, Savepoint]:
        """The export at ``user_path``: its path relative to the root and its
        record, after checking every worker's manifest is there. Raises
        ``SavepointRecordError`` naming the file that is missing or wrong."""
        path = self._relative(resolve_under_root(self.root, user_path))
        name = f"{path}/{RECORD_FILE}"
        try:
            text = read_regular(resolve_under_root(self.root, name, max_depth=None), RECORD_MAX_BYTES).decode()
        except FileNotFoundError:
            raise NoSuchExport(f"{name}: no such file: {path} is not an exported savepoint, or its "
                                       "export did not finish") from None
        except OSError as error:        # not a regular file, too large
            raise SavepointRecordError(f"{name}: cannot be read ({error.strerror})") from None
        except UnicodeDecodeError as error:
            raise SavepointRecordError(f"{name}: cannot be read ({error})") from None
        savepoint = from_json(text, name)
        if savepoint.state is not SavepointState.COMPLETE:
            raise SavepointRecordError(f"{name}: records a {savepoint.state.value} savepoint; only a complete "
                                       "one can be imported")
        for index, checkpoint in sorted(savepoint.checkpoints.items()):
            # The store layout's own naming, relative to the root.
            manifest = f"{worker_dir(path, index)}/{manifest_name(checkpoint)}"
            if not resolve_under_root(self.root, manifest, max_depth=None).is_file():
                raise NoSuchExport(f"{manifest}: no such file: worker {index}'s checkpoint {checkpoint} "
                                           "is missing from the export")
        return path, savepoint
