"""Paths that come from outside (a user, a file someone else wrote) confined
to a root: never through ``..``, an absolute path, or a symbolic link that
leads out of it. Each refusal is its own error, named."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from sparkpoint.errors import shown

# Linux's limit of a file name's bytes; a whole path's characters, which
# keeps it within Linux's 4096 bytes.
NAME_MAX = 255
PATH_CHARS = 1024


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


def resolve_under_root(root: Path, user_path: str, root_name: str = "savepoint root") -> Path:
    """The real path of ``user_path`` (relative to ``root``), refusing
    anything that is not strictly inside ``root``. The path need not exist
    (an export target); the part of it that does is resolved through its links.

    The caller should create or open what this returns without following
    links again (nothing here stops a link swapped in afterwards).
    """
    if not isinstance(user_path, str) or not user_path.strip():
        raise InvalidPath(f"a path is required, relative to the {root_name}")
    quoted = shown(user_path)
    bad = next((char for char in user_path if not char.isprintable()), None)
    if bad is not None:
        raise InvalidPath(f"{quoted}: the character {bad!r} (U+{ord(bad):04X}) is not allowed in a path")
    if len(user_path) > PATH_CHARS:
        raise InvalidPath(f"{quoted}: longer than {PATH_CHARS} characters")
    relative = PurePosixPath(user_path)
    long_name = next((part for part in relative.parts if len(part.encode()) > NAME_MAX), None)
    if long_name is not None:
        raise InvalidPath(f"{quoted}: the name {shown(long_name)} is longer than {NAME_MAX} bytes, the file-name "
                          "limit")
    if relative.is_absolute() or user_path.startswith("~"):
        raise AbsolutePath(f"{quoted}: an absolute path is not allowed; give a path relative to the {root_name}")
    if ".." in relative.parts:
        raise ParentReference(f"{quoted}: '..' is not allowed in a path under the {root_name}")
    base = Path(root).resolve()
    resolved = (base / relative).resolve()
    if resolved == base:
        raise InvalidPath(f"{quoted} is the {root_name} itself; give a directory inside it")
    if not resolved.is_relative_to(base):
        raise OutsideRoot(f"{quoted} leads outside the {root_name} through a symbolic link")
    return resolved
