"""``sparkpoint savepoint ...``: savepoints through the controller's REST API.

\b
  create LABEL        every worker checkpoints now; waits until the savepoint
                      is complete, showing progress (--no-wait: return at once)
  list                every savepoint, oldest first
  show ID             one savepoint: its checkpoints and exports
  restore ID          restart every worker from the savepoint; refused (exit 2)
                      when a transactional sink would publish output again,
                      unless --allow-republish
  dispose ID          forget it: retention may delete what it pinned
  export ID PATH      copy it into PATH under the savepoint root
                      (SP_SAVEPOINT_DIR), self-contained; waits until written
  import PATH         record an exported savepoint as a new one of this
                      deployment

The controller's address: --controller URL, else SP_CONTROLLER_URL, else
http://localhost:8080. ``--output json`` prints the controller's answer.
"""

# No `from __future__ import annotations`: typer reads the commands' annotations,
# some of which name values of the enclosing function.

from typing import Annotated, Any

import typer
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from controller.savepoints.model import InvalidSavepointId, savepoint_number
from sparkpoint.tables import table
from sparkpoint_cli.controller_api import ControllerApi, ControllerOption, connect
from sparkpoint_cli.errors import DONE, CommandError
from sparkpoint_cli.output import Output, OutputOption, show, styled, when
from sparkpoint_cli.settings import CliSettings
from sparkpoint_cli.waiting import Waiting


def checked_savepoint_id(text: str) -> str:
    """A bad id is a usage error, before anything is sent."""
    try:
        savepoint_number(text)
    except InvalidSavepointId as error:
        raise typer.BadParameter(str(error)) from None
    return text


SavepointId = Annotated[str, typer.Argument(metavar="ID", callback=checked_savepoint_id, show_default=False)]
Timeout = Annotated[float, typer.Option("--timeout", metavar="SECONDS", help="how long to wait")]


def checkpoints_cell(view: dict[str, Any]) -> str:
    """``0:5 1:10``: each worker's checkpoint in the savepoint."""
    return " ".join(f"{index}:{checkpoint}" for index, checkpoint in view["checkpoints"].items()) or "-"


def list_view(views: list[dict[str, Any]]) -> RenderableType:
    if not views:
        return "No savepoints."
    return table(("ID", "LABEL", "STATE", "CREATED", "WORKERS:CHECKPOINTS", "IMPORTED FROM"),
                 [(v["id"], v["label"], styled(v["state"]), when(v["created_at"]), checkpoints_cell(v),
                   v["imported_from"]) for v in views])


def savepoint_view(view: dict[str, Any]) -> RenderableType:
    fields = [("Savepoint", view["id"]), ("Label", view["label"]), ("State", styled(view["state"])),
              ("Created", when(view["created_at"])), ("Completed", when(view["completed_at"])),
              ("Pipeline", view["pipeline_fingerprint"]), ("Failure", view["failure"]),
              ("Imported from", view["imported_from"])]
    facts = Table.grid(padding=(0, 2))
    for name, value in fields:
        if value:
            facts.add_row(f"{name}:", Text(value) if isinstance(value, str) else value)
    parts: list[RenderableType] = [facts, "", table(
        ("WORKER", "CHECKPOINT"), [(str(index), str(view["checkpoints"].get(str(index), "-")))
                                   for index in range(view["worker_count"])])]
    if view["exports"]:
        parts += ["", table(("EXPORT", "STATE", "WRITTEN", "STARTED", "ERROR"),
                            [(e["path"], styled(e["state"]), f"{e['workers_written']} of {e['worker_count']}",
                              when(e["started_at"]), e["error"]) for e in view["exports"]])]
    return Group(*parts)


def restore_view(view: dict[str, Any]) -> str:
    lines = [f"Restoring savepoint {view['savepoint_id']} ({view['label'] or 'no label'}):"]
    for part in view["workers"]:
        source = f"checkpoint {part['checkpoint_id']}" + (f" of {part['import_dir']}" if part["import_dir"] else "")
        if part["worker_id"]:
            lines.append(f"  worker {part['worker_index']} ({part['worker_id']}) restarts from {source}")
        else:
            lines.append(f"  worker {part['worker_index']} starts from {source} when it registers")
    lines.append("Workers will restart from the savepoint: input after it is processed again, and its output "
                 "produced again.")
    if view["republished"]:
        lines.append("Transactional sinks will publish again what they published past it (--allow-republish):")
        lines += [f"  - {line}" for line in view["republished"]]
    else:
        lines.append("No transactional sink has published past it: none publishes anything twice.")
    return "\n".join(lines)


def pinning(view: dict[str, Any]) -> str:
    if view["state"] != "pending":
        return f"{view['id']}: {view['state']}"
    return f"{view['id']}: {len(view['checkpoints'])} of {view['worker_count']} workers pinned"


# -- the commands ------------------------------------------------------------------

def create(api: ControllerApi, label: str, no_wait: bool, timeout: float, output: Output, waiting: Waiting) -> int:
    created = api.post("/savepoints", {"label": label})
    savepoint = created["id"]
    if no_wait:
        show(output, created, f"{savepoint}: being taken; follow it with: sparkpoint savepoint show {savepoint}")
        return DONE
    final = waiting.follow(lambda: api.get(f"/savepoints/{savepoint}"), lambda view: view["state"] != "pending",
                           timeout, describe=pinning,
                           counts=lambda view: (len(view["checkpoints"]), view["worker_count"]))
    if final is None:
        raise CommandError(f"{savepoint} is still being taken after {timeout:g} s (the controller goes on: "
                           f"sparkpoint savepoint show {savepoint})")
    if final["state"] == "failed":
        raise CommandError(f"savepoint {savepoint} failed: {final['failure']}")
    show(output, final, savepoint_view(final))
    return DONE


def export(api: ControllerApi, savepoint: str, path: str, no_wait: bool, timeout: float, output: Output,
           waiting: Waiting) -> int:
    started = api.post(f"/savepoints/{savepoint}/export", {"path": path})
    path = started["path"]      # as the controller resolved it under the root
    if no_wait:
        show(output, started, f"Exporting {savepoint} to {path}; follow it with: sparkpoint savepoint show {savepoint}")
        return DONE

    def fetch() -> dict[str, Any]:
        exports = [e for e in api.get(f"/savepoints/{savepoint}")["exports"] if e["path"] == path]
        if not exports:
            raise CommandError(f"the controller no longer knows the export of {savepoint} to {path}: it restarted, "
                               "and exports in progress do not survive that; export again to a new path")
        return exports[0]

    final = waiting.follow(fetch, lambda e: e["state"] != "pending", timeout,
                           describe=lambda e: f"{savepoint} -> {path}: {e['workers_written']} of {e['worker_count']} "
                                              "workers written",
                           counts=lambda e: (e["workers_written"], e["worker_count"]))
    if final is None:
        raise CommandError(f"the export of {savepoint} to {path} is still running after {timeout:g} s (the "
                           f"controller goes on: sparkpoint savepoint show {savepoint})")
    if final["state"] == "failed":
        raise CommandError(f"the export of {savepoint} to {path} failed: {final['error']}")
    show(output, final, f"Exported {savepoint} to {path} under the savepoint root (SP_SAVEPOINT_DIR).\n"
                        f"On a deployment whose savepoint root holds it: sparkpoint savepoint import {path}")
    return DONE


def savepoint_app(settings: CliSettings, waiting: Waiting) -> typer.Typer:
    app = typer.Typer(help=__doc__, rich_markup_mode=None)

    @app.command("create")
    def create_command(label: Annotated[str, typer.Argument(help="letters, digits, spaces and - _ . , : ( ) / + @ "
                                                                 "#; at most 100 characters", show_default=False)],
                       no_wait: Annotated[bool, typer.Option("--no-wait", help="return once the controller has "
                                                                               "asked the workers")] = False,
                       timeout: Timeout = 600.0, controller: ControllerOption = None,
                       output: OutputOption = Output.TEXT) -> int:
        """Take a savepoint now: every worker checkpoints; shows progress until it is complete."""
        return create(connect(controller, settings), label, no_wait, timeout, output, waiting)

    @app.command("list")
    def list_command(controller: ControllerOption = None, output: OutputOption = Output.TEXT) -> int:
        """Every savepoint, oldest first."""
        views = connect(controller, settings).get("/savepoints")
        show(output, views, list_view(views))
        return DONE

    @app.command("show")
    def show_command(savepoint: SavepointId, controller: ControllerOption = None,
                     output: OutputOption = Output.TEXT) -> int:
        """One savepoint, its checkpoints and exports."""
        view = connect(controller, settings).get(f"/savepoints/{savepoint}")
        show(output, view, savepoint_view(view))
        return DONE

    @app.command("restore")
    def restore_command(savepoint: SavepointId,
                        allow_republish: Annotated[bool, typer.Option(
                            "--allow-republish", help="accept that transactional sinks publish again what they "
                                                      "published past the savepoint")] = False,
                        controller: ControllerOption = None, output: OutputOption = Output.TEXT) -> int:
        """Restart every worker from a savepoint."""
        view = connect(controller, settings).post(f"/savepoints/{savepoint}/restore",
                                                  {"allow_republish": allow_republish})
        show(output, view, restore_view(view))
        return DONE

    @app.command("dispose")
    def dispose_command(savepoint: SavepointId, controller: ControllerOption = None,
                        output: OutputOption = Output.TEXT) -> int:
        """Forget a savepoint; retention may delete its files."""
        view = connect(controller, settings).delete(f"/savepoints/{savepoint}")
        show(output, view, f"Disposed {view['id']} ({view['label'] or 'no label'}): retention may now delete the "
                           "checkpoints it pinned.")
        return DONE

    @app.command("export")
    def export_command(savepoint: SavepointId,
                       path: Annotated[str, typer.Argument(help="a new directory, relative to the savepoint root "
                                                                "(SP_SAVEPOINT_DIR)", show_default=False)],
                       no_wait: Annotated[bool, typer.Option("--no-wait", help="return once the controller has "
                                                                               "started the export")] = False,
                       timeout: Timeout = 600.0, controller: ControllerOption = None,
                       output: OutputOption = Output.TEXT) -> int:
        """Copy a savepoint into a self-contained directory; shows progress until it is written."""
        return export(connect(controller, settings), savepoint, path, no_wait, timeout, output,
                      waiting)

    @app.command("import")
    def import_command(path: Annotated[str, typer.Argument(help="the export's directory, relative to the savepoint "
                                                                "root", show_default=False)],
                       label: Annotated[str | None, typer.Option(help="instead of the exported savepoint's label")]
                       = None,
                       controller: ControllerOption = None, output: OutputOption = Output.TEXT) -> int:
        """Record an exported savepoint as a new one."""
        body = {"path": path} if label is None else {"path": path, "label": label}
        imported = connect(controller, settings).post("/savepoints/import", body)
        show(output, imported, Group(Text(f"Imported {imported['imported_from']} as {imported['id']}."), "",
                                     savepoint_view(imported)))
        return DONE

    return app
