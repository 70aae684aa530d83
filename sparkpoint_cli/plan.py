"""``sparkpoint plan --pipeline NEW --from CHECKPOINT`` prints, node by node,
what restoring a worker's checkpoint into the pipeline file NEW would keep,
start fresh, drop or refuse, before anything is deployed.

Exit status: 0 the restore would go ahead, 2 it would be refused, 1 the
command could not run (a missing file, a broken pipeline, bad arguments).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from sparkpoint_cli.errors import DONE, REFUSED, CommandError
from sparkpoint_cli.settings import CliSettings

if TYPE_CHECKING:
    from worker.api.graph import Pipeline
    from worker.checkpointing.layout import StateSchema
    from worker.checkpointing.manifest import Manifest

Derive = Callable[["Pipeline"], "dict[str, StateSchema]"]


def load_manifest(source: Path, checkpoint_id: int | None) -> Manifest:
    """A manifest file, or checkpoint ``checkpoint_id`` (default: the newest)
    of a worker's checkpoint directory. Only reads."""
    from worker.checkpointing.manifest import Manifest, ManifestError
    from worker.checkpointing.store import CheckpointStore

    try:
        if source.is_file():
            if checkpoint_id is not None:
                raise CommandError(f"--checkpoint: {source} is a manifest file, not a checkpoint directory")
            return Manifest.from_json(source.read_text(), str(source))
        if not source.is_dir():
            raise CommandError(f"--from {source}: no such file or directory")
        store = CheckpointStore(source)
        ids = store.checkpoint_ids()
        if not ids:
            raise CommandError(f"--from {source}: no checkpoint manifests in it (expected a worker's "
                               "SP_CHECKPOINT_DIR or a manifest file)")
        if checkpoint_id is not None and checkpoint_id not in ids:
            raise CommandError(f"--checkpoint {checkpoint_id}: not in {source} (it holds {ids[0]}..{ids[-1]})")
        return store.load(checkpoint_id if checkpoint_id is not None else ids[-1])
    except (ManifestError, OSError) as error:
        raise CommandError(str(error)) from None


def spark_schemas(pipeline: Pipeline) -> dict[str, StateSchema]:
    """Stateful nodes' columns from a short-lived local Spark session, started
    only if there is a stateful node (it takes seconds)."""
    if not any(node.is_stateful for node in pipeline.nodes()):
        return {}
    from pyspark.sql import SparkSession

    from worker.stateplan.derive import stateful_schemas

    print("starting Spark to derive the stateful nodes' columns (analysis only, no query runs)...", file=sys.stderr)
    spark = (SparkSession.builder.master("local[1]").appName("sparkpoint-plan")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        return stateful_schemas(pipeline, spark)
    finally:
        spark.stop()


def describe_restore(manifest: Manifest, pipeline_path: Path, fingerprint: str) -> str:
    taken = datetime.fromtimestamp(manifest.created_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return (f"Checkpoint {manifest.checkpoint_id} of {manifest.worker_id} (taken {taken}, pipeline "
            f"{manifest.pipeline_fingerprint or '?'}) into {pipeline_path} (pipeline {fingerprint})")


def plan_command(args: argparse.Namespace, derive: Derive) -> int:
    from pyspark.errors import PySparkException

    from worker.api.graph import PipelineError
    from worker.api.loader import load_pipeline
    from worker.runtime.progress import summarize_error
    from worker.stateplan.layout import pipeline_layout
    from worker.stateplan.plan import plan_manifest
    from worker.stateplan.report import render_plan

    manifest = load_manifest(args.source, args.checkpoint)
    try:
        pipeline = load_pipeline(args.pipeline)
        new = pipeline_layout(pipeline, derive(pipeline))
    except PipelineError as error:
        raise CommandError(str(error)) from None
    except PySparkException as error:
        raise CommandError(f"{args.pipeline}: {summarize_error(str(error))}") from None
    plan = plan_manifest(manifest, new, force=args.force)
    print(describe_restore(manifest, args.pipeline, new.fingerprint), "", render_plan(plan), sep="\n")
    return REFUSED if plan.refused else DONE


def add_plan_command(commands: argparse._SubParsersAction, settings: CliSettings, derive: Derive) -> None:
    plan = commands.add_parser("plan", help="what a restore into a pipeline would keep, start fresh, drop or refuse",
                               description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    plan.add_argument("--pipeline", type=Path, required=True, help="the new pipeline file")
    plan.add_argument("--from", dest="source", type=Path, required=True, metavar="CHECKPOINT",
                      help="a worker's checkpoint directory (SP_CHECKPOINT_DIR) or one manifest file")
    plan.add_argument("--checkpoint", type=int, help="checkpoint id in the directory (default: the newest)")
    force = settings.force_graph_change
    plan.add_argument("--force", action=argparse.BooleanOptionalAction, default=force,
                      help="restore a changed graph over finished nodes (default: SP_FORCE_GRAPH_CHANGE, "
                           f"now {str(force).lower()})")
    plan.set_defaults(run=lambda args: plan_command(args, derive))
