"""A checkpoint's manifest: what it is a cut of, and every file it holds.

The manifest is written last and atomically: a checkpoint exists (is durable)
exactly when its manifest does. Files are named by their content digest, so
a file Spark rewrites under the same name (``offsets/N`` after a restore) is
a different file to us.

A manifest read back (from the store, or an exported savepoint another
deployment wrote) is believed only as far as it names files inside its
query's directory: each query name one plain name, each file path a
normalised relative path, each digest 64 lowercase hex digits. Anything
else is refused as it is read, before a single file is written by it.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field

from sparkpoint import limits
from sparkpoint.errors import clip, shown
from sparkpoint.messages import CheckpointInfo
from sparkpoint.messages import QueryCut as MessageQueryCut
from sparkpoint.paths import UnsafePath, checked_relative
from worker.checkpointing.layout import QueryLayout

FORMAT_VERSION = 1
SHA256 = re.compile(r"[0-9a-f]{64}")


class ManifestError(ValueError):
    """A manifest cannot be read; the message names the file."""


@dataclass(frozen=True)
class FileEntry:
    sha256: str
    size: int


@dataclass(frozen=True)
class QueryCut:
    name: str
    batch_id: int
    offsets: dict[str, int]
    # Path inside the query's working directory -> content.
    files: dict[str, FileEntry]
    # Its source and stateful nodes; None in manifests written before it was recorded.
    layout: QueryLayout | None = None

    def required_files(self) -> tuple[str, ...]:
        """What Spark needs to resume the query from this cut: its ``metadata``
        (the query's id) and the offsets of its batch. Without them Spark
        silently starts the query anew, from the source's beginning, or
        plans the batch again."""
        return "metadata", f"offsets/{self.batch_id}"

    def missing_files(self) -> list[str]:
        """Required files the cut lacks: a torn cut."""
        return [path for path in self.required_files() if path not in self.files]


@dataclass(frozen=True)
class Manifest:
    checkpoint_id: int
    worker_id: str
    created_at: float
    duration_ms: float
    bytes_copied: int
    node_names: tuple[str, ...]
    queries: tuple[QueryCut, ...]
    pipeline_fingerprint: str = ""
    finished_nodes: tuple[str, ...] = ()     # nodes whose bounded input ended
    format_version: int = field(default=FORMAT_VERSION)

    @property
    def size_bytes(self) -> int:
        return sum(entry.size for query in self.queries for entry in query.files.values())

    def info(self) -> CheckpointInfo:
        """What the controller learns of this checkpoint."""
        return CheckpointInfo(
            checkpoint_id=self.checkpoint_id,
            queries=tuple(MessageQueryCut(q.name, q.batch_id, dict(q.offsets)) for q in self.queries),
            size_bytes=self.size_bytes,
            duration_ms=self.duration_ms,
            created_at=self.created_at,
            bytes_copied=self.bytes_copied,
        )

    def digests(self) -> set[str]:
        return {entry.sha256 for query in self.queries for entry in query.files.values()}

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, indent=1)

    @classmethod
    def from_json(cls, text: str, source: str) -> Manifest:
        try:
            data = json.loads(text)
            if data.get("format_version") != FORMAT_VERSION:
                raise ManifestError(f"{source}: unsupported manifest format {data.get('format_version')!r}")
            return cls(
                checkpoint_id=int(data["checkpoint_id"]),
                worker_id=str(data["worker_id"]),
                created_at=float(data["created_at"]),
                duration_ms=float(data["duration_ms"]),
                bytes_copied=int(data["bytes_copied"]),
                node_names=tuple(data["node_names"]),
                pipeline_fingerprint=str(data.get("pipeline_fingerprint", "")),
                finished_nodes=tuple(data.get("finished_nodes", ())),
                queries=tuple(
                    QueryCut(
                        name=_query_name(q["name"]),
                        batch_id=int(q["batch_id"]),
                        offsets={str(k): int(v) for k, v in q["offsets"].items()},
                        files={checked_relative(path, f"query {q['name']}: file"): _entry(path, e)
                               for path, e in q["files"].items()},
                        layout=QueryLayout.from_dict(q["layout"]) if q.get("layout") is not None else None,
                    )
                    for q in data["queries"]
                ),
            )
        except ManifestError:
            raise
        except UnsafePath as error:
            raise ManifestError(f"{source}: names a file outside its query's directory ({error})") from None
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise ManifestError(f"{source}: not a valid checkpoint manifest ({type(error).__name__}: "
                                f"{clip(str(error), 200)})") from None


def _query_name(name: object) -> str:
    """A query's name is its directory's: one plain name."""
    if not isinstance(name, str) or not limits.NAME.fullmatch(name):
        raise ValueError(f"query name {shown(name)} is not a plain name ({limits.NAME_RULE})")
    return name


def _entry(path: str, entry: dict) -> FileEntry:
    """A file's content: its SHA-256 (which names its blob) and size."""
    sha256, size = entry["sha256"], int(entry["size"])
    if not isinstance(sha256, str) or not SHA256.fullmatch(sha256):
        raise ValueError(f"{path}: sha256 {shown(sha256)} is not 64 lowercase hex digits")
    if size < 0:
        raise ValueError(f"{path}: size {size} is negative")
    return FileEntry(sha256, size)
