"""Paths that come from outside (a user, a file someone else wrote) confined
to a root: never through ``..``, an absolute path, or a symbolic link that
leads out of it. Each refusal is its own error, named."""

from __future__ import annotations

import re
import string
from pathlib import Path

from sparkpoint.errors import shown

# Paths a user gives under the savepoint root: at most 16 names separated by
# '/', each of 1 to 63 ASCII letters, digits, inner spaces and the
# punctuation below (so a path stays within 1024 characters, and a name far
# within Linux's 255-byte limit), no name "..", not absolute.
NAME_MAX = 63
DEPTH_MAX = 16
FILE_NAME_BYTES = 255       # Linux's limit, for names a file someone else wrote gives
PATH_CHARS = DEPTH_MAX * (NAME_MAX + 1)
_PUNCTUATION = "_.,:+@#()-"
_PATH_CHARS = frozenset(string.ascii_letters + string.digits + _PUNCTUATION + " /")
PATH_RULE = (f"at most {DEPTH_MAX} names separated by '/', each of 1 to {NAME_MAX} ASCII letters, digits, spaces "
             f"and {' '.join(_PUNCTUATION)}, without a space at either end; no name '..'")
_CHAR = "[A-Za-z0-9_.,:+@#()-]"         # _PUNCTUATION as a class ('-' last: no escapes needed)
_NAME = f"(?!\\.\\.(?:/|$)){_CHAR}(?:[ {_CHAR[1:-1]}]{{0,{NAME_MAX - 2}}}{_CHAR})?"
# The same rule as a pattern (the API documents it; JSON Schema's dialect).
PATH_PATTERN = f"^(?![/~])(?!(?:\\./)*\\.$){_NAME}(?:/{_NAME}){{0,{DEPTH_MAX - 1}}}$"
_NAME_RE = re.compile(_NAME)


class UnsafePath(ValueError):
    """A given path is not allowed under its root; the message says why."""


class InvalidPath(UnsafePath):
    pass


class AbsolutePath(UnsafePath):
    pass


class ParentReference(UnsafePath):
    pass


class OutsideRoot(UnsafePath):
    pass


def checked_relative(path: str, what: str) -> str:
    """``path`` if it is a normalised relative POSIX path of printable
    characters: not absolute, no empty, ``.`` or ``..`` name, each name
    within ``FILE_NAME_BYTES``. Lexical only, for names a file someone else
    wrote gives (a manifest's), before anything is written by them; raises
    ``UnsafePath`` naming ``what`` and the path."""
    quoted = shown(path)
    if not isinstance(path, str) or not path:
        raise InvalidPath(f"{what}: a path is required")
    bad = next((char for char in path if not char.isprintable()), None)
    if bad is not None:
        raise InvalidPath(f"{what}: {quoted}: the character {bad!r} (U+{ord(bad):04X}) is not allowed in a path")
    if path.startswith("/"):
        raise AbsolutePath(f"{what}: {quoted} is an absolute path")
    names = path.split("/")
    if ".." in names:
        raise ParentReference(f"{what}: {quoted}: '..' is not allowed")
    if "" in names or "." in names or any(len(name.encode()) > FILE_NAME_BYTES for name in names):
        raise InvalidPath(f"{what}: {quoted} is not a normalised relative path")
    return path


def resolve_under_root(root: Path, user_path: str, root_name: str = "savepoint root", *,
                       max_depth: int | None = DEPTH_MAX) -> Path:
    """The real path of ``user_path`` (relative to ``root``), refusing
    anything that is not strictly inside ``root`` or breaks the path rule
    (``PATH_PATTERN``, which the API documents; ``max_depth=None`` for a
    path built from one that kept it, e.g. a file inside an export). The
    path need not exist (an export target); the part of it that does is
    resolved through its links.

    The caller should create or open what this returns without following
    links again (nothing here stops a link swapped in afterwards).
    """
    if not isinstance(user_path, str) or not user_path:
        raise InvalidPath(f"a path is required, relative to the {root_name}")
    quoted = shown(user_path)
    if user_path.startswith(("/", "~")):
        raise AbsolutePath(f"{quoted}: an absolute path is not allowed; give a path relative to the {root_name}")
    bad = next((char for char in user_path if char not in _PATH_CHARS), None)
    if bad is not None:
        raise InvalidPath(f"{quoted}: the character {bad!r} (U+{ord(bad):04X}) is not allowed in a path; use "
                          f"{PATH_RULE}")
    names = user_path.split("/")
    if max_depth is not None and len(names) > max_depth:
        raise InvalidPath(f"{quoted}: {len(names)} names deep, at most {max_depth} are allowed")
    if ".." in names:
        raise ParentReference(f"{quoted}: '..' is not allowed in a path under the {root_name}")
    if all(name == "." for name in names):
        raise InvalidPath(f"{quoted} is the {root_name} itself; give a directory inside it")
    odd = next((name for name in names if not _NAME_RE.fullmatch(name)), None)
    if odd is not None:
        raise InvalidPath(f"{quoted}: the name {shown(odd)} is not allowed: names are 1 to {NAME_MAX} characters, "
                          "without a space at either end")
    base = Path(root).resolve()
    resolved = (base / user_path).resolve()
    if resolved == base:
        raise InvalidPath(f"{quoted} is the {root_name} itself; give a directory inside it")
    if not resolved.is_relative_to(base):
        raise OutsideRoot(f"{quoted} leads outside the {root_name} through a symbolic link")
    return resolved
