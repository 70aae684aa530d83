"""What the REST API takes and answers, as its OpenAPI document describes
it: request bodies, path parameters and their rules (as documentation: the
core checks them, so each rule has one wording, and the patterns are the
ones the code enforces), the answers each endpoint may give."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path
from pydantic import BaseModel, Field
from starlette.convertors import StringConvertor, register_url_convertor

from controller.savepoints.model import ID_PATTERN, LABEL_MAX, LABEL_PUNCTUATION
from sparkpoint import limits
from sparkpoint.paths import PATH_CHARS, PATH_PATTERN, PATH_RULE

MAX_BODY_BYTES = 64 * 1024
ERROR_MAX = 2000


class ErrorBody(BaseModel):
    error: str = Field(description=f"What is wrong, in one short message (at most {ERROR_MAX} characters)")


_ANSWERS = {
    400: "Bad input: an id, a label, a path, a query parameter or a body that breaks the rules (the message "
         "names it)",
    404: "No such worker, savepoint, export or file",
    409: "Refused: the request contradicts the pipeline's state (the message says what would be needed)",
    413: f"The body is larger than {MAX_BODY_BYTES} bytes",
    415: "Not JSON: requests that change something need Content-Type: application/json",
    503: "The controller cannot write its state (its disk): nothing was changed",
}


def answers(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorBody, "description": _ANSWERS[code]} for code in codes}


CHANGES = (400, 413, 415, 503)      # what any request that changes something may be answered



class SavepointIdSegment(StringConvertor):
    """A path segment that may name a savepoint: anything but the
    collection's actions (``/savepoints/import``), so a method an action
    does not take is 405 there, not a savepoint id refused."""

    regex = "(?!import$)[^/]+"


register_url_convertor("savepoint_id", SavepointIdSegment())

WorkerId = Annotated[str, Path(description=f"A worker id: {limits.NAME_RULE}",
                               json_schema_extra={"pattern": f"^{limits.NAME.pattern}$"})]
SavepointId = Annotated[str, Path(description="sp- and 6 to 12 digits, e.g. sp-000042",
                                  json_schema_extra={"pattern": ID_PATTERN})]

# The label rule of controller.savepoints.model as a pattern, read as JSON
# Schema reads one (ECMA-262 with Unicode): str.isalnum() is exactly the
# Unicode categories L and N (\w there is ASCII only, unlike Python's), and
# the punctuation needs no escape in a class.
_LABEL_CHAR = "[\\p{L}\\p{N}_.,:()/+@#-]"
LABEL_PATTERN = f"^(?:{_LABEL_CHAR}(?:[ {_LABEL_CHAR[1:-1]}]*{_LABEL_CHAR})?)?$"
_PATH_RULE = f"relative to the savepoint root (SP_SAVEPOINT_DIR): {PATH_RULE}; no link leading out of the root"


class CreateSavepoint(BaseModel):
    label: str = Field(json_schema_extra={"pattern": LABEL_PATTERN, "maxLength": LABEL_MAX},
                       description=f"Letters, digits, spaces and {' '.join(LABEL_PUNCTUATION.strip())}; no leading or "
                                   f"trailing space; at most {LABEL_MAX} characters")


class RestoreSavepoint(BaseModel):
    allow_republish: bool = Field(False, description="Accept that transactional sinks publish again what they "
                                                     "published past the savepoint")


class ExportSavepoint(BaseModel):
    path: str = Field(json_schema_extra={"maxLength": PATH_CHARS, "pattern": PATH_PATTERN},
                      description=f"A new or empty directory, {_PATH_RULE}")


class ImportSavepoint(BaseModel):
    path: str = Field(json_schema_extra={"maxLength": PATH_CHARS, "pattern": PATH_PATTERN},
                      description=f"An exported savepoint's directory, {_PATH_RULE}")
    label: str | None = Field(None, json_schema_extra={"pattern": LABEL_PATTERN, "maxLength": LABEL_MAX},
                              description="Replaces the exported savepoint's label (the same rules as a new one's)")


class ReleaseWorker(BaseModel):
    """No fields: a JSON body is what a cross-site form cannot send."""


class Released(BaseModel):
    worker_id: str
    worker_index: int = Field(description="Free now: another worker id may register with it")
    last_checkpoint_id: int = Field(description="The released worker's newest complete checkpoint")


class Health(BaseModel):
    status: str = Field(description="ok, or unhealthy")
    problems: list[str] = Field(default_factory=list, description="What is wrong, one line each")
