"""A savepoint record, its validation, and its durable JSON form.

Every error here is the user's to fix (a bad id, label or file), so each is
a ``SavepointError`` whose message says what is wrong: REST answers it with
a 4xx, the CLI prints it as one line.
"""

from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkpoint import limits
from sparkpoint.errors import clip, shown

RECORD_FORMAT = 1
LABEL_MAX = 100
# Beyond letters and digits: what a label needs, nothing that a shell, a
# terminal or a URL would read as syntax.
LABEL_PUNCTUATION = " -_.,:()/+@#"
_ID = re.compile(r"sp-[0-9]{6,12}")
WORKERS_MAX = 1024          # SP_WORKER_COUNT's bound (sparkpoint.settings.WorkerCount)
ID_PATTERN = f"^{_ID.pattern}$"     # the same rule as a JSON Schema pattern (the API's description)


class SavepointError(ValueError):
    """Something about a savepoint the user must fix; the message says what."""


class SavepointConflict(SavepointError):
    """The request is well formed but contradicts the state of the savepoints
    or of the pipeline (REST 409); the message says what would be needed."""


class InvalidLabel(SavepointError):
    pass


class InvalidSavepointId(SavepointError):
    pass


class SavepointRecordError(SavepointError):
    """A savepoint record cannot be read; the message names the file."""


class RecordNotWritten(Exception):
    """A savepoint record (or an export's directory) cannot be written, so
    the change was not made; not the user's to fix (REST 503). The message
    names the file and the reason."""


class SavepointState(str, enum.Enum):
    PENDING = "pending"       # workers asked for a checkpoint; not all have committed one
    COMPLETE = "complete"     # pins one complete checkpoint of every worker
    FAILED = "failed"         # pins nothing; ``failure`` says why


@dataclass(frozen=True)
class Savepoint:
    savepoint_id: str
    label: str
    created_at: float
    pipeline_fingerprint: str
    worker_count: int
    state: SavepointState
    checkpoints: Mapping[int, int] = field(default_factory=dict)   # worker index -> the checkpoint it pins
    completed_at: float | None = None
    failure: str = ""
    # Set for a savepoint exported by another deployment: its directory under
    # the savepoint root. Its checkpoints are ids in that directory, not in
    # the workers' stores, so it pins nothing there.
    imported_from: str = ""


def format_savepoint_id(number: int) -> str:
    return f"sp-{number:06d}"


def savepoint_number(savepoint_id: str) -> int:
    """The number in a savepoint id; raises ``InvalidSavepointId`` for anything
    else (ids become directory names: nothing else may pass)."""
    if not isinstance(savepoint_id, str) or not _ID.fullmatch(savepoint_id):
        raise InvalidSavepointId(f"{shown(savepoint_id)} is not a savepoint id: ids look like sp-000042")
    return int(savepoint_id[3:])


def validate_label(label: str) -> str:
    """``label`` if it is a fine label; else ``InvalidLabel`` naming the problem."""
    if not isinstance(label, str):
        raise InvalidLabel(f"label: expected text, got {type(label).__name__}")
    if len(label) > LABEL_MAX:
        raise InvalidLabel(f"label: {len(label)} characters, at most {LABEL_MAX} are allowed")
    if label != label.strip():
        raise InvalidLabel("label: leading or trailing spaces are not allowed")
    for position, char in enumerate(label, 1):
        if not (char.isalnum() or char in LABEL_PUNCTUATION):
            raise InvalidLabel(
                f"label: {char!r} (U+{ord(char):04X}) at position {position} is not allowed; use letters, digits, "
                f"spaces and {' '.join(LABEL_PUNCTUATION.strip())}")
    return label


def to_record(savepoint: Savepoint) -> dict[str, Any]:
    return {
        "format": RECORD_FORMAT,
        "id": savepoint.savepoint_id,
        "label": savepoint.label,
        "created_at": savepoint.created_at,
        "completed_at": savepoint.completed_at,
        "state": savepoint.state.value,
        "failure": savepoint.failure,
        "pipeline_fingerprint": savepoint.pipeline_fingerprint,
        "worker_count": savepoint.worker_count,
        # JSON object keys are strings.
        "checkpoints": {str(index): checkpoint for index, checkpoint in sorted(savepoint.checkpoints.items())},
        "imported_from": savepoint.imported_from,
    }


def to_json(savepoint: Savepoint) -> str:
    return json.dumps(to_record(savepoint), indent=1, sort_keys=True)


def _checked(savepoint: Savepoint) -> Savepoint:
    """Raises ValueError if the record contradicts itself or leaves the
    bounds the controller holds wire input to (``sparkpoint.limits``): an
    imported record is input too."""
    savepoint_number(savepoint.savepoint_id)
    validate_label(savepoint.label)
    if not 1 <= savepoint.worker_count <= WORKERS_MAX:
        raise ValueError(f"worker_count {savepoint.worker_count} is outside 1..{WORKERS_MAX}")
    for index, checkpoint in savepoint.checkpoints.items():
        if not 0 <= index < savepoint.worker_count or not 1 <= checkpoint <= limits.CHECKPOINT_ID_MAX:
            raise ValueError(f"worker {index} pins checkpoint {checkpoint}")
    for name, when in (("created_at", savepoint.created_at), ("completed_at", savepoint.completed_at or 0.0)):
        if not math.isfinite(when) or when < 0:
            raise ValueError(f"{name} {when} is not a finite number >= 0")
    if len(savepoint.pipeline_fingerprint) > limits.TOKEN_MAX or not savepoint.pipeline_fingerprint.isprintable():
        raise ValueError(f"pipeline_fingerprint is not printable text of at most {limits.TOKEN_MAX} characters")
    if len(savepoint.imported_from) > limits.PATH_MAX:
        raise ValueError(f"imported_from is longer than {limits.PATH_MAX} characters")
    if savepoint.state is SavepointState.COMPLETE and len(savepoint.checkpoints) != savepoint.worker_count:
        raise ValueError(f"complete, but pins {len(savepoint.checkpoints)} of {savepoint.worker_count} workers")
    return savepoint


def from_record(data: Mapping[str, Any], source: str) -> Savepoint:
    """A validated savepoint from its record; ``source`` names it in errors."""
    try:
        if data.get("format") != RECORD_FORMAT:
            raise ValueError(f"unsupported record format {shown(data.get('format'))}")
        completed_at = data.get("completed_at")
        return _checked(Savepoint(
            savepoint_id=data["id"],
            label=data["label"],
            created_at=float(data["created_at"]),
            pipeline_fingerprint=str(data["pipeline_fingerprint"]),
            worker_count=int(data["worker_count"]),
            state=SavepointState(data["state"]),
            checkpoints={int(index): int(checkpoint) for index, checkpoint in data["checkpoints"].items()},
            completed_at=None if completed_at is None else float(completed_at),
            failure=clip(str(data.get("failure", "")), limits.TEXT_MAX),     # free text: clipped, as on the wire
            imported_from=str(data.get("imported_from", "")),   # absent in records of before imports
        ))
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise SavepointRecordError(f"{source}: not a valid savepoint record ({clip(str(error), 200)})") from None


def from_json(text: str, source: str) -> Savepoint:
    try:
        data = json.loads(text)
    except ValueError as error:
        raise SavepointRecordError(f"{source}: not a valid savepoint record ({clip(str(error), 200)})") from None
    if not isinstance(data, dict):
        raise SavepointRecordError(f"{source}: not a valid savepoint record (not a JSON object)")
    return from_record(data, source)
