"""Savepoint records on the controller's disk::

    SP_CONTROLLER_STATE_DIR/savepoints/sp-000042.json    one record per savepoint
    SP_CONTROLLER_STATE_DIR/savepoints/quarantine/       records that could not be read

Each record is written atomically whenever it changes (not on the
controller's checkpoint interval): a savepoint is a durable promise to the
user. A record that cannot be read is moved aside, never a reason to stop.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from controller.savepoints.model import (
    InvalidSavepointId,
    Savepoint,
    SavepointRecordError,
    from_json,
    savepoint_number,
    to_json,
)
from sparkpoint.fileio import atomic_write

QUARANTINE = "quarantine"


@dataclass(frozen=True)
class LoadedRecords:
    savepoints: list[Savepoint]
    problems: list[str]     # one line per record moved to quarantine
    highest_used: int       # the highest id number, quarantined ones included: ids are never reused


class SavepointStore:
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def path(self, savepoint_id: str) -> Path:
        savepoint_number(savepoint_id)      # an id is a file name: nothing else may pass
        return self.directory / f"{savepoint_id}.json"

    def save(self, savepoint: Savepoint) -> None:
        atomic_write(self.path(savepoint.savepoint_id), to_json(savepoint).encode())

    def delete(self, savepoint_id: str) -> None:
        self.path(savepoint_id).unlink(missing_ok=True)

    def probe(self) -> None:
        """Write (durably) and remove a small file: raises OSError while the
        directory cannot be written."""
        probe = self.directory / ".probe"
        atomic_write(probe, b"probe")
        probe.unlink()

    def load(self) -> LoadedRecords:
        """Every readable record; unreadable ones (and a record whose content
        names another id) go to ``quarantine/``. Raises OSError if the
        directory itself cannot be read."""
        if not self.directory.is_dir():
            return LoadedRecords([], [], 0)
        for stray in self.directory.glob(".*.tmp"):     # a write a crash interrupted
            stray.unlink(missing_ok=True)
        savepoints, problems = [], []
        for path in sorted(self.directory.glob("sp-*.json")):
            try:
                savepoint = from_json(path.read_text(), str(path))
                if savepoint.savepoint_id != path.stem:
                    raise SavepointRecordError(f"{path}: holds savepoint {savepoint.savepoint_id}, not {path.stem}")
                savepoints.append(savepoint)
            except (SavepointRecordError, UnicodeDecodeError) as error:
                problems.append(f"{error}; moved to {QUARANTINE}/")
                self._quarantine(path)
        return LoadedRecords(savepoints, problems, self._highest_number())

    def _quarantine(self, path: Path) -> None:
        target = self.directory / QUARANTINE / path.name
        target.parent.mkdir(exist_ok=True)
        path.replace(target)

    def _highest_number(self) -> int:
        numbers = []
        for path in [*self.directory.glob("sp-*.json"), *(self.directory / QUARANTINE).glob("sp-*.json")]:
            try:
                numbers.append(savepoint_number(path.stem))
            except InvalidSavepointId:
                pass    # not a name we gave out
        return max(numbers, default=0)
