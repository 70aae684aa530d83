"""``sparkpoint plan --pipeline NEW --from SOURCE`` prints, node by node,
what restoring a checkpoint into the pipeline file NEW would keep, start
fresh, drop or refuse, before anything is deployed.

SOURCE is a worker's checkpoint directory (SP_CHECKPOINT_DIR; --checkpoint
picks one, default the newest), one manifest file, or a savepoint id: then
the controller names worker --worker's checkpoint in it, read from the
savepoint's export or import under SP_SAVEPOINT_DIR, or from
--checkpoint-dir (that worker's SP_CHECKPOINT_DIR).

Exit status: 0 the restore would go ahead, 2 it would be refused, 1 the
command could not run (a missing file, a broken pipeline, bad arguments).
"""

# No `from __future__ import annotations`: typer reads the commands' annotations,
# some of which name values of the enclosing function.

import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Group
from rich.text import Text

from controller.savepoints.exports import worker_dir
from controller.savepoints.model import InvalidSavepointId, savepoint_number
from sparkpoint.paths import UnsafePath, resolve_under_root
from sparkpoint_cli.controller_api import ControllerOption, connect
from sparkpoint_cli.errors import DONE, REFUSED, CommandError
from sparkpoint_cli.output import Output, OutputOption, emit, print_json, when
from sparkpoint_cli.settings import CliSettings

if TYPE_CHECKING:
    from worker.api.graph import Pipeline
    from worker.checkpointing.layout import StateSchema
    from worker.checkpointing.manifest import Manifest
    from worker.stateplan.plan import RestorePlan

Derive = Callable[["Pipeline"], "dict[str, StateSchema]"]


def load_manifest(source: Path, checkpoint_id: int | None, option: str = "--from") -> "Manifest":
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
            raise CommandError(f"{option} {source}: no such file or directory")
        store = CheckpointStore(source)
        ids = store.checkpoint_ids()
        if not ids:
            raise CommandError(f"{option} {source}: no checkpoint manifests in it (expected a worker's "
                               "SP_CHECKPOINT_DIR or a manifest file)")
        if checkpoint_id is not None and checkpoint_id not in ids:
            raise CommandError(f"--checkpoint {checkpoint_id}: not in {source} (it holds {ids[0]}..{ids[-1]})")
        return store.load(checkpoint_id if checkpoint_id is not None else ids[-1])
    except (ManifestError, OSError) as error:
        raise CommandError(str(error)) from None


def is_savepoint_id(source: str) -> bool:
    try:
        savepoint_number(source)
    except InvalidSavepointId:
        return False
    return not Path(source).exists()


def savepoint_manifest(view: dict[str, Any], worker: int, savepoint_root: Path,
                       checkpoint_dir: Path | None) -> "Manifest":
    """Worker ``worker``'s checkpoint in the savepoint ``view`` (the
    controller's record), from wherever it can be read: the savepoint's import
    or a complete export under the savepoint root, else ``checkpoint_dir``."""
    from worker.checkpointing.store import CheckpointStore

    savepoint = view["id"]
    checkpoint_id = view["checkpoints"].get(str(worker))
    if checkpoint_id is None:
        raise CommandError(f"savepoint {savepoint} ({view['state']}) holds no checkpoint of worker {worker}")
    copies = [view["imported_from"]] if view["imported_from"] else []
    copies += [e["path"] for e in view["exports"] if e["state"] == "complete"]
    places = []
    for copy in copies:
        try:
            places.append(resolve_under_root(savepoint_root, worker_dir(copy, worker)))
        except UnsafePath as error:
            raise CommandError(f"savepoint {savepoint}: {error}") from None
    places += [checkpoint_dir] if checkpoint_dir is not None else []
    for place in places:
        if CheckpointStore(place).manifest_path(checkpoint_id).is_file():
            return load_manifest(place, checkpoint_id, "--checkpoint-dir")
    looked = ", ".join(str(p) for p in places) or "nowhere"
    raise CommandError(f"savepoint {savepoint}: checkpoint {checkpoint_id} of worker {worker} is not in {looked}; "
                       f"give worker {worker}'s SP_CHECKPOINT_DIR with --checkpoint-dir, or export the savepoint "
                       "(sparkpoint savepoint export) and set SP_SAVEPOINT_DIR to its root")


def spark_schemas(pipeline: "Pipeline") -> "dict[str, StateSchema]":
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


def describe_restore(manifest: "Manifest", pipeline_path: Path, fingerprint: str, savepoint: str | None) -> str:
    of = f" (savepoint {savepoint})" if savepoint else ""
    return (f"Checkpoint {manifest.checkpoint_id} of {manifest.worker_id}{of} (taken {when(manifest.created_at)}, "
            f"pipeline {manifest.pipeline_fingerprint or '?'}) into {pipeline_path} (pipeline {fingerprint})")


def plan_json(plan: "RestorePlan", manifest: "Manifest", savepoint: str | None, pipeline_path: Path,
              fingerprint: str) -> dict[str, Any]:
    return {"checkpoint_id": manifest.checkpoint_id, "worker_id": manifest.worker_id, "savepoint_id": savepoint,
            "checkpoint_pipeline": manifest.pipeline_fingerprint, "pipeline": str(pipeline_path),
            "pipeline_fingerprint": fingerprint, "refused": plan.refused, "refusals": plan.refusals(),
            "warnings": list(plan.warnings),
            "nodes": [{"node": d.node, "action": d.action.value, "reason": d.reason,
                       "old": str(d.old) if d.old else None, "new": str(d.new) if d.new else None}
                      for d in plan.nodes],
            "queries": [asdict(q) for q in plan.queries]}


def add_plan_command(app: typer.Typer, settings: CliSettings, derive: Derive) -> None:
    @app.command("plan", help=__doc__, short_help="what a restore into a pipeline would keep, start fresh, drop or "
                                                  "refuse")
    def plan_command(
            pipeline: Annotated[Path, typer.Option("--pipeline", help="the new pipeline file", show_default=False)],
            source: Annotated[str, typer.Option("--from", metavar="CHECKPOINT|SAVEPOINT", show_default=False,
                                                help="a worker's checkpoint directory (SP_CHECKPOINT_DIR), one "
                                                     "manifest file, or a savepoint id")],
            checkpoint: Annotated[int | None, typer.Option(help="checkpoint id in the directory (default: the "
                                                                "newest)")] = None,
            worker: Annotated[int, typer.Option(min=0, help="with a savepoint: whose checkpoint in it")] = 0,
            checkpoint_dir: Annotated[Path | None, typer.Option(
                help="with a savepoint: that worker's SP_CHECKPOINT_DIR, if the savepoint is not exported")] = None,
            force: Annotated[bool, typer.Option(
                "--force/--no-force", help="restore a changed graph over finished nodes (default: "
                                           f"SP_FORCE_GRAPH_CHANGE, now {str(settings.force_graph_change).lower()})",
                show_default=False)] = settings.force_graph_change,
            controller: ControllerOption = None, output: OutputOption = Output.TEXT) -> int:
        """What a restore into a pipeline would keep, start fresh, drop or refuse."""
        from pyspark.errors import PySparkException

        from worker.api.graph import PipelineError
        from worker.api.loader import load_pipeline
        from worker.runtime.progress import summarize_error
        from worker.stateplan.layout import pipeline_layout
        from worker.stateplan.plan import plan_manifest
        from worker.stateplan.report import plan_view

        savepoint = source if is_savepoint_id(source) else None
        if savepoint is not None:
            if checkpoint is not None:
                raise CommandError("--checkpoint: a savepoint names its checkpoints itself")
            view = connect(controller, settings).get(f"/savepoints/{savepoint}")
            manifest = savepoint_manifest(view, worker, settings.savepoint_dir, checkpoint_dir)
        else:
            manifest = load_manifest(Path(source), checkpoint)
        try:
            loaded = load_pipeline(pipeline)
            new = pipeline_layout(loaded, derive(loaded))
        except PipelineError as error:
            raise CommandError(str(error)) from None
        except PySparkException as error:
            raise CommandError(f"{pipeline}: {summarize_error(str(error))}") from None
        plan = plan_manifest(manifest, new, force=force)
        if output is Output.JSON:
            print_json(plan_json(plan, manifest, savepoint, pipeline, new.fingerprint))
        else:
            emit(Group(Text(describe_restore(manifest, pipeline, new.fingerprint, savepoint)), "",
                                 plan_view(plan)))
        return REFUSED if plan.refused else DONE
