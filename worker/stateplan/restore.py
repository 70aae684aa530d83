"""Rebuilding Spark's working directory from a durable checkpoint."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path

from worker.checkpointing.manifest import Manifest, ManifestError
from worker.checkpointing.policy import restore_candidates
from worker.checkpointing.store import CheckpointStore, CorruptCheckpoint
from worker.stateplan.layout import PipelineLayout
from worker.stateplan.materialize import materialize_plan
from worker.stateplan.plan import RestorePlan, plan_manifest
from worker.stateplan.report import render_plan

log = logging.getLogger("sparkpoint.worker.restore")


class RestoreRefused(RuntimeError):
    """No intact checkpoint can be restored without publishing output twice,
    or the pipeline changed in a way its state cannot follow."""


@dataclass(frozen=True)
class RestoreOutcome:
    manifest: Manifest | None
    corrupt: list[str] = field(default_factory=list)   # one line per checkpoint skipped
    plan: RestorePlan | None = None                    # node by node: kept, fresh, dropped

    @property
    def resumed(self) -> Manifest | None:
        """The restored checkpoint as the new pipeline's queries see it: each
        query that continues one of the checkpoint's (its origin) at the
        origin's batch and offsets, under its own name."""
        if self.manifest is None or self.plan is None:
            return self.manifest
        cuts = {q.name: q for q in self.manifest.queries}
        return replace(self.manifest, queries=tuple(
            replace(cuts[q.origin], name=q.name) for q in self.plan.queries if q.origin is not None))


def restore(store: CheckpointStore, chosen: int | None, query_root: Path, layout: PipelineLayout, *,
            floor: int | None = None, force_graph_change: bool = False) -> RestoreOutcome:
    """Restore ``chosen``, or the newest older intact checkpoint if it is corrupt,
    into the pipeline whose layout is ``layout``: state goes by node name.

    Steps:
    1. List candidates newest first, from ``chosen`` down to ``floor``.
    2. Verify each (manifest parses, every file present with its checksum);
       quarantine and name a corrupt one, try the next.
    3. Plan the first intact one into the pipeline, node by node; a refused
       plan stops the restore (an older checkpoint would be refused too).
    4. Materialise it into ``query_root`` by the plan.
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
        plan = plan_manifest(manifest, layout, force=force_graph_change)
        if plan.refused:
            raise RestoreRefused(f"checkpoint {checkpoint_id} cannot be restored into this pipeline:\n"
                                 + render_plan(plan))
        log.info("restoring checkpoint %d by node name:\n%s", checkpoint_id, render_plan(plan))
        # 4.
        materialize_plan(store, manifest, plan, query_root)
        return RestoreOutcome(manifest, corrupt, plan)
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
