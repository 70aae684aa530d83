"""Which files of a Spark query's working directory form a consistent cut.

For the latest committed batch N (the highest ``commits/N``): ``metadata``,
``offsets/<=N``, ``commits/<=N``, ``sources/``, state metadata, and state
versions ``<= N+1`` (batch N writes state version N+1). Nothing of the batch
in flight (``offsets/N+1``, state ``N+2``) is ever part of a checkpoint.
Spark's ``.crc`` side files are left out: Hadoop reads a file without one.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from sparkpoint.offsets import flatten

_LOG_ENTRY = re.compile(r"^(offsets|commits)/(\d+)$")
# HDFS-backed store: 12.delta, 12.snapshot; RocksDB: 12.zip, 12.changelog, 12_<uuid>.zip
_STATE_VERSION = re.compile(r"^state/.+/(\d+)(?:_[^/]*)?\.(delta|snapshot|zip|changelog)$")


def _newest_entry(log_dir: Path) -> int | None:
    """The highest batch id among a Spark log's entries (``offsets/N``, ``commits/N``), or None."""
    if not log_dir.is_dir():
        return None
    return max((int(name) for name in os.listdir(log_dir) if name.isdigit()), default=None)


def committed_batch(query_dir: Path) -> int | None:
    """The highest batch id with a commit log entry, or None before the first commit."""
    return _newest_entry(query_dir / "commits")


def planned_batch(query_dir: Path) -> int | None:
    """The highest batch id with an offset log entry (planned; committed or not), or None."""
    return _newest_entry(query_dir / "offsets")


def list_files(query_dir: Path) -> list[str]:
    """Every regular file under ``query_dir``, as relative POSIX paths."""
    found = []
    for directory, _, names in os.walk(query_dir):
        for name in names:
            found.append(Path(directory, name).relative_to(query_dir).as_posix())
    return sorted(found)


def select_cut(paths: list[str], batch_id: int) -> list[str]:
    """The files of a consistent cut at ``batch_id`` (pure: paths in, paths out)."""
    selected = []
    for path in paths:
        name = path.rsplit("/", 1)[-1]
        if name.endswith(".crc") or name.endswith(".tmp") or name.startswith("."):
            continue
        log_entry = _LOG_ENTRY.match(path)
        if log_entry:
            if int(log_entry.group(2)) <= batch_id:
                selected.append(path)
            continue
        version = _STATE_VERSION.match(path)
        if version:
            if int(version.group(1)) <= batch_id + 1:
                selected.append(path)
            continue
        if path == "metadata" or path.startswith(("sources/", "state/")):
            selected.append(path)
    return selected


def parse_offsets(text: str) -> dict[str, int]:
    """Source offsets from an ``offsets/N`` file: a version line, the batch's
    metadata, then one JSON line per source, flat (``sparkpoint.offsets``)."""
    offsets: dict[str, int] = {}
    for line in text.splitlines()[2:]:
        line = line.strip()
        if not line or line == "-":
            continue
        try:
            value = json.loads(line)
        except ValueError:
            continue
        offsets.update(flatten(value))
    return offsets
