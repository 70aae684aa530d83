"""Rebuilding Spark's working directory from a durable checkpoint."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from worker.checkpointing.manifest import Manifest, ManifestError
from worker.checkpointing.policy import restore_candidates
from worker.checkpointing.store import CheckpointStore, CorruptCheckpoint

log = logging.getLogger("sparkpoint.worker.restore")


class RestoreRefused(RuntimeError):
    """No intact checkpoint can be restored without publishing output twice."""


@dataclass(frozen=True)
class RestoreOutcome:
    manifest: Manifest | None
    corrupt: list[str] = field(default_factory=list)   # one line per checkpoint skipped


def restore(store: CheckpointStore, chosen: int | None, query_root: Path, *, floor: int | None = None) -> RestoreOutcome:
    """Restore ``chosen``, or the newest older intact checkpoint if it is corrupt.

    Steps:
    1. List candidates newest first, from ``chosen`` down to ``floor``.
    2. Verify each (manifest parses, every file present with its checksum);
       quarantine and name a corrupt one, try the next.
    3. Materialise the first intact one into ``query_root``.
    """
    corrupt: list[str] = []
    # 1.
    for checkpoint_id in restore_candidates(store.checkpoint_ids(), chosen, floor):
        # 2.
        try:
            manifest = store.load(checkpoint_id)
            store.verify(manifest)
        except (ManifestError, CorruptCheckpoint) as error:
            log.error("checkpoint %d is corrupt, not restoring it: %s", checkpoint_id, error)
            corrupt.append(str(error))
            store.quarantine(checkpoint_id)
            continue
        # 3.
        store.materialize(manifest, query_root)
        return RestoreOutcome(manifest, corrupt)
    if floor is not None:
        # Also with nothing to restore (a lost volume): replaying the source
        # from the beginning would publish everything again.
        raise RestoreRefused(
            f"no intact checkpoint at or after {floor} in {store.root}: a sink already published output "
            f"up to checkpoint {floor}, and restoring an older one (or none) would publish it twice"
            + (f" (corrupt: {'; '.join(corrupt)})" if corrupt else ""))
    if chosen is not None:
        log.warning("no intact checkpoint to restore: replaying the source from the beginning")
    return RestoreOutcome(None, corrupt)
