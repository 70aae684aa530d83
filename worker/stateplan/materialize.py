"""Rebuilding Spark's working directory from a checkpoint by a restore plan:
the I/O half of ``remap`` (which says where each file goes).

Steps (``materialize_plan``):
1. Remap the checkpoint's files onto the new pipeline's queries and copy them.
2. A query that continues an origin of another name gets a new query id.
3. A fresh stateful node inside a continuing query gets an empty state at the
   version its next batch loads, written with the settings its origin's
   ``offsets/N`` pins.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path

from worker.checkpointing.manifest import Manifest, QueryCut
from worker.checkpointing.store import CheckpointStore
from worker.stateplan.plan import RestorePlan
from worker.stateplan.remap import remap_files
from worker.stateplan.sparkfiles import empty_state_files, pinned_conf, stream_metadata


def materialize_plan(store: CheckpointStore, manifest: Manifest, plan: RestorePlan, query_root: Path) -> None:
    """Write the new pipeline's working directories under ``query_root`` (the
    checkpoint is verified; the plan is not refused). Raises ``ValueError``
    (``UnsupportedStateStore``) when an empty state cannot be written."""
    # 1.
    remapped = remap_files(plan, {q.name: q.files for q in manifest.queries})
    store.materialize(replace(manifest, queries=tuple(
        QueryCut(name, 0, {}, files) for name, files in remapped.files.items())), query_root)
    # 2.
    for name in remapped.fresh_metadata:
        (query_root / name / "metadata").write_bytes(stream_metadata(str(uuid.uuid4())))
    # 3.
    origins = {q.name: q for q in plan.queries}
    cuts = {q.name: q for q in manifest.queries}
    for empty in remapped.empty_state:
        origin = cuts[origins[empty.query].origin]
        offsets_path = f"offsets/{origin.batch_id}"
        offsets = store.blob_path(origin.files[offsets_path].sha256).read_text()
        conf = pinned_conf(offsets, f"checkpoint {manifest.checkpoint_id}: {origin.name}/{offsets_path}")
        for path, data in empty_state_files(empty, conf).items():
            target = query_root / empty.query / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
