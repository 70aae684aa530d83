"""A checkpoint's manifest: what it is a cut of, and every file it holds.

The manifest is written last and atomically: a checkpoint exists (is durable)
exactly when its manifest does. Files are named by their content digest, so
a file Spark rewrites under the same name (``offsets/N`` after a restore) is
a different file to us.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from sparkpoint.messages import CheckpointInfo
from sparkpoint.messages import QueryCut as MessageQueryCut
from worker.checkpointing.layout import QueryLayout

FORMAT_VERSION = 1


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
                        name=q["name"],
                        batch_id=int(q["batch_id"]),
                        offsets={str(k): int(v) for k, v in q["offsets"].items()},
                        files={path: FileEntry(e["sha256"], int(e["size"])) for path, e in q["files"].items()},
                        layout=QueryLayout.from_dict(q["layout"]) if q.get("layout") is not None else None,
                    )
                    for q in data["queries"]
                ),
            )
        except ManifestError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise ManifestError(f"{source}: not a valid checkpoint manifest ({type(error).__name__}: {error})") from None
