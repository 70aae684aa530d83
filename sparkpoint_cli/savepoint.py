"""``sparkpoint savepoint ...``: savepoints through the controller's REST API.

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
http://localhost:8080.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from controller.savepoints.model import InvalidSavepointId, savepoint_number
from sparkpoint.tables import render_table as table
from sparkpoint_cli.controller_api import ControllerApi, controller_of, controller_option
from sparkpoint_cli.errors import DONE, CommandError

View = TypeVar("View")


@dataclass(frozen=True)
class Waiting:
    """How the CLI waits for the controller; tests replace the clock."""

    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    interval_s: float = 0.5

    def follow(self, fetch: Callable[[], View], describe: Callable[[View], str], done: Callable[[View], bool],
               timeout_s: float) -> View | None:
        """Fetch until ``done``, printing ``describe`` on stderr whenever it
        changes; None if the deadline passes first."""
        deadline = self.clock() + timeout_s
        shown = ""
        while True:
            view = fetch()
            line = describe(view)
            if line != shown:
                print(line, file=sys.stderr)
                shown = line
            if done(view):
                return view
            if self.clock() >= deadline:
                return None
            self.sleep(self.interval_s)


def savepoint_id(text: str) -> str:
    """An argparse type: a bad id is a usage error, before anything is sent."""
    try:
        savepoint_number(text)
    except InvalidSavepointId as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def when(timestamp: float | None) -> str:
    return "" if timestamp is None else datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def checkpoints_cell(view: dict[str, Any]) -> str:
    """``0:5 1:10``: each worker's checkpoint in the savepoint."""
    return " ".join(f"{index}:{checkpoint}" for index, checkpoint in view["checkpoints"].items()) or "-"


def render_list(views: list[dict[str, Any]]) -> str:
    if not views:
        return "No savepoints."
    return "\n".join(table(("ID", "LABEL", "STATE", "CREATED", "WORKERS:CHECKPOINTS", "IMPORTED FROM"),
                           [(v["id"], v["label"], v["state"], when(v["created_at"]), checkpoints_cell(v),
                             v["imported_from"]) for v in views]))


def render_savepoint(view: dict[str, Any]) -> str:
    fields = [("Savepoint", view["id"]), ("Label", view["label"]), ("State", view["state"]),
              ("Created", when(view["created_at"])), ("Completed", when(view["completed_at"])),
              ("Pipeline", view["pipeline_fingerprint"]), ("Failure", view["failure"]),
              ("Imported from", view["imported_from"])]
    lines = [f"{name + ':':<15}{value}" for name, value in fields if value]
    lines += [""] + table(("WORKER", "CHECKPOINT"),
                          [(str(index), str(view["checkpoints"].get(str(index), "-")))
                           for index in range(view["worker_count"])])
    if view["exports"]:
        lines += [""] + table(("EXPORT", "STATE", "WRITTEN", "STARTED", "ERROR"),
                              [(e["path"], e["state"], f"{e['workers_written']} of {e['worker_count']}",
                                when(e["started_at"]), e["error"]) for e in view["exports"]])
    return "\n".join(lines)


def render_restore(view: dict[str, Any]) -> str:
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


def pinning_progress(view: dict[str, Any]) -> str:
    if view["state"] != "pending":
        return f"{view['id']}: {view['state']}"
    return f"{view['id']}: {len(view['checkpoints'])} of {view['worker_count']} workers pinned"


# -- the commands ------------------------------------------------------------------

def create(api: ControllerApi, args: argparse.Namespace, waiting: Waiting) -> int:
    created = api.post("/savepoints", {"label": args.label})
    savepoint = created["id"]
    if args.no_wait:
        print(f"{savepoint}: being taken; follow it with: sparkpoint savepoint show {savepoint}")
        return DONE
    final = waiting.follow(lambda: api.get(f"/savepoints/{savepoint}"), pinning_progress,
                           lambda view: view["state"] != "pending", args.timeout)
    if final is None:
        raise CommandError(f"{savepoint} is still being taken after {args.timeout:g} s (the controller goes on: "
                           f"sparkpoint savepoint show {savepoint})")
    if final["state"] == "failed":
        raise CommandError(f"savepoint {savepoint} failed: {final['failure']}")
    print(render_savepoint(final))
    return DONE


def export(api: ControllerApi, args: argparse.Namespace, waiting: Waiting) -> int:
    started = api.post(f"/savepoints/{args.id}/export", {"path": args.path})
    path = started["path"]      # as the controller resolved it under the root
    if args.no_wait:
        print(f"Exporting {args.id} to {path}; follow it with: sparkpoint savepoint show {args.id}")
        return DONE

    def fetch() -> dict[str, Any]:
        exports = [e for e in api.get(f"/savepoints/{args.id}")["exports"] if e["path"] == path]
        if not exports:
            raise CommandError(f"the controller no longer knows the export of {args.id} to {path}: it restarted, "
                               "and exports in progress do not survive that; export again to a new path")
        return exports[0]

    final = waiting.follow(fetch, lambda e: f"{args.id} -> {path}: {e['workers_written']} of {e['worker_count']} "
                                            "workers written", lambda e: e["state"] != "pending", args.timeout)
    if final is None:
        raise CommandError(f"the export of {args.id} to {path} is still running after {args.timeout:g} s (the "
                           f"controller goes on: sparkpoint savepoint show {args.id})")
    if final["state"] == "failed":
        raise CommandError(f"the export of {args.id} to {path} failed: {final['error']}")
    print(f"Exported {args.id} to {path} under the savepoint root (SP_SAVEPOINT_DIR).\n"
          f"On a deployment whose savepoint root holds it: sparkpoint savepoint import {path}")
    return DONE


def import_(api: ControllerApi, args: argparse.Namespace) -> int:
    body = {"path": args.path} if args.label is None else {"path": args.path, "label": args.label}
    imported = api.post("/savepoints/import", body)
    print(f"Imported {imported['imported_from']} as {imported['id']}.\n")
    print(render_savepoint(imported))
    return DONE


def restore(api: ControllerApi, args: argparse.Namespace) -> int:
    print(render_restore(api.post(f"/savepoints/{args.id}/restore", {"allow_republish": args.allow_republish})))
    return DONE


def dispose(api: ControllerApi, args: argparse.Namespace) -> int:
    disposed = api.delete(f"/savepoints/{args.id}")
    print(f"Disposed {disposed['id']} ({disposed['label'] or 'no label'}): retention may now delete the "
          "checkpoints it pinned.")
    return DONE


def show(api: ControllerApi, args: argparse.Namespace) -> int:
    print(render_savepoint(api.get(f"/savepoints/{args.id}")))
    return DONE


def list_(api: ControllerApi) -> int:
    print(render_list(api.get("/savepoints")))
    return DONE


def add_savepoint_command(commands: argparse._SubParsersAction, environ: dict[str, str], waiting: Waiting) -> None:
    group = commands.add_parser("savepoint", help="create, list, show, restore, dispose, export and import savepoints",
                                description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = group.add_subparsers(dest="action", required=True, parser_class=type(group))
    common = controller_option()

    def controller(args: argparse.Namespace) -> ControllerApi:
        return controller_of(args, environ)

    def waits(parser: argparse.ArgumentParser, what: str) -> None:
        parser.add_argument("--no-wait", action="store_true", help=f"return once the controller has {what}")
        parser.add_argument("--timeout", type=float, default=600.0, metavar="SECONDS",
                            help="how long to wait (default 600)")

    parser = actions.add_parser("create", parents=[common], help="take a savepoint now")
    parser.add_argument("label", help="letters, digits, spaces and - _ . , : ( ) / + @ #; at most 100 characters")
    waits(parser, "asked the workers")
    parser.set_defaults(run=lambda args: create(controller(args), args, waiting))

    parser = actions.add_parser("list", parents=[common], help="every savepoint, oldest first")
    parser.set_defaults(run=lambda args: list_(controller(args)))

    parser = actions.add_parser("show", parents=[common], help="one savepoint, its checkpoints and exports")
    parser.add_argument("id", type=savepoint_id)
    parser.set_defaults(run=lambda args: show(controller(args), args))

    parser = actions.add_parser("restore", parents=[common], help="restart every worker from a savepoint")
    parser.add_argument("id", type=savepoint_id)
    parser.add_argument("--allow-republish", action="store_true",
                        help="accept that transactional sinks publish again what they published past the savepoint")
    parser.set_defaults(run=lambda args: restore(controller(args), args))

    parser = actions.add_parser("dispose", parents=[common], help="forget a savepoint; retention may delete its files")
    parser.add_argument("id", type=savepoint_id)
    parser.set_defaults(run=lambda args: dispose(controller(args), args))

    parser = actions.add_parser("export", parents=[common], help="copy a savepoint into a self-contained directory")
    parser.add_argument("id", type=savepoint_id)
    parser.add_argument("path", help="a new directory, relative to the savepoint root (SP_SAVEPOINT_DIR)")
    waits(parser, "started the export")
    parser.set_defaults(run=lambda args: export(controller(args), args, waiting))

    parser = actions.add_parser("import", parents=[common], help="record an exported savepoint as a new one")
    parser.add_argument("path", help="the export's directory, relative to the savepoint root")
    parser.add_argument("--label", help="instead of the exported savepoint's label")
    parser.set_defaults(run=lambda args: import_(controller(args), args))
