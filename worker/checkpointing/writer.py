"""Taking one checkpoint: a consistent cut of every query, copied incrementally."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sparkpoint.faults import NO_FAULTS, FaultInjector
from worker.checkpointing.cut import committed_batch, list_files, parse_offsets, select_cut
from worker.checkpointing.layout import QueryLayout
from worker.checkpointing.manifest import FileEntry, Manifest, QueryCut
from worker.checkpointing.store import CheckpointStore


class TornCut(RuntimeError):
    """A query's cut lacks what Spark needs to resume it (its ``metadata``
    vanished): the checkpoint is not written."""


@dataclass(frozen=True)
class _Seen:
    size: int
    mtime_ns: int
    inode: int
    sha256: str


class CheckpointWriter:
    def __init__(self, store: CheckpointStore, query_root: Path, worker_id: str, node_names: tuple[str, ...],
                 pipeline_fingerprint: str, *, clock: Callable[[], float] = time.time,
                 faults: FaultInjector = NO_FAULTS, layouts: Mapping[str, QueryLayout] | None = None) -> None:
        self.store = store
        self.query_root = query_root
        self.worker_id = worker_id
        self.node_names = node_names
        self.pipeline_fingerprint = pipeline_fingerprint
        self._clock = clock
        self._faults = faults
        # Query name -> its layout, recorded so a restore can map state by node name.
        self.layouts = dict(layouts or {})
        # (query, path) -> what we stored for it last time. Spark never rewrites
        # a committed file in place, but after a restore it writes a new file
        # under an old name: size, mtime and inode tell the two apart.
        self._seen: dict[tuple[str, str], _Seen] = {}
        self._last_signature: object = None
        # Nodes whose bounded input ended (set by the worker as branches finish).
        self.finished_nodes: tuple[str, ...] = ()

    def _cut(self, query: str) -> tuple[int, dict[str, int], list[str]] | None:
        query_dir = self.query_root / query
        batch = committed_batch(query_dir)
        if batch is None:
            return None
        offsets_file = query_dir / "offsets" / str(batch)
        return batch, parse_offsets(offsets_file.read_text()), select_cut(list_files(query_dir), batch)

    def _stat_signature(self, query: str, paths: list[str]) -> tuple:
        signature = []
        for path in paths:
            try:
                st = (self.query_root / query / path).stat()
            except FileNotFoundError:
                continue
            signature.append((path, st.st_size, st.st_mtime_ns, st.st_ino))
        return tuple(signature)

    def _store_file(self, query: str, path: str) -> tuple[FileEntry, int] | None:
        source = self.query_root / query / path
        try:
            stat = source.stat()
        except FileNotFoundError:
            return None
        seen = self._seen.get((query, path))
        known = seen.sha256 if seen and (seen.size, seen.mtime_ns, seen.inode) == (
            stat.st_size, stat.st_mtime_ns, stat.st_ino) else None
        try:
            blob = self.store.put_file(source, known)
        except FileNotFoundError:
            return None
        self._seen[(query, path)] = _Seen(stat.st_size, stat.st_mtime_ns, stat.st_ino, blob.sha256)
        return FileEntry(blob.sha256, blob.size), (blob.size if blob.copied else 0)

    def take(self, checkpoint_id: int) -> Manifest | None:
        """Take checkpoint ``checkpoint_id``; None if no query has committed a
        batch yet, or none has committed one since the previous checkpoint (an
        idle pipeline does not churn identical checkpoints).

        Steps:
        1. Fix each query's cut: its latest committed batch N and the files of it.
        2. Copy into the store what it does not already hold (by content),
           fsynced; a cut without what Spark needs to resume is ``TornCut``.
        3. Write the manifest atomically: only now is the checkpoint durable.
        """
        started = self._clock()
        # 1.
        cuts = {}
        for query in sorted(p.name for p in self.query_root.iterdir() if p.is_dir()) \
                if self.query_root.is_dir() else []:
            cut = self._cut(query)
            if cut is not None:
                cuts[query] = cut
        if not cuts:
            return None
        # Same files, same stat, same finished nodes as last time: nothing happened since.
        finished = self.finished_nodes
        signature = ({query: (batch, self._stat_signature(query, paths)) for query, (batch, _, paths) in cuts.items()},
                     finished)
        if signature == self._last_signature:
            return None
        # 2.
        copied = 0
        queries = []
        for query, (batch, offsets, paths) in cuts.items():
            files = {}
            for path in paths:
                stored = self._store_file(query, path)
                if stored is None:
                    # Spark purged an old log entry or state version meanwhile;
                    # it keeps what is needed to recover the batches we cut at.
                    continue
                files[path], added = stored
                copied += added
            cut = QueryCut(query, batch, offsets, files, self.layouts.get(query))
            if cut.missing_files():
                raise TornCut(f"query {query} at batch {batch} lacks {' and '.join(cut.missing_files())}")
            queries.append(cut)
        self._faults.hit("checkpoint.blobs_copied")
        # 3.
        manifest = Manifest(
            checkpoint_id=checkpoint_id,
            worker_id=self.worker_id,
            created_at=started,
            duration_ms=round((self._clock() - started) * 1000, 3),
            bytes_copied=copied,
            node_names=self.node_names,
            queries=tuple(queries),
            pipeline_fingerprint=self.pipeline_fingerprint,
            finished_nodes=finished,
        )
        self.store.write_manifest(manifest)
        self._last_signature = signature
        self._faults.hit("checkpoint.manifest_written")
        return manifest
