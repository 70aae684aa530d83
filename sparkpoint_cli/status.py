"""``sparkpoint status``: the pipeline, its workers and their sinks, from the
controller's ``/status``; ``--watch`` follows it until Ctrl-C (redrawn in
place on a terminal; one snapshot after another when piped, or one JSON
document a line with ``--output json``)."""

# No `from __future__ import annotations`: typer reads the commands' annotations,
# some of which name values of the enclosing function.

import json
from typing import Annotated, Any

import typer
from rich.console import Group, RenderableType
from rich.live import Live
from rich.text import Text

from sparkpoint.tables import table
from sparkpoint_cli.controller_api import ControllerApi, ControllerOption, connect
from sparkpoint_cli.errors import DONE
from sparkpoint_cli.output import Output, OutputOption, emit, print_json, seconds, size, stdout, styled
from sparkpoint_cli.settings import CliSettings
from sparkpoint_cli.waiting import Waiting


def _checkpoint(worker: dict[str, Any]) -> str:
    last = worker["last_checkpoint"]
    return f"{last['checkpoint_id']} ({seconds(last['age_s'])} ago)" if last else "-"


def _recovery(worker: dict[str, Any]) -> str:
    recovery = worker["recovery"]
    if recovery["active"]:
        return f"{recovery['caught_up_pct']:.1f}% of {size(recovery['target_bytes'])}"
    if recovery["restored_checkpoint_id"]:
        took = f" in {seconds(recovery['duration_s'])}" if recovery["duration_s"] else ""
        return f"restored {recovery['restored_checkpoint_id']}{took}"
    return "-"


def _restarts(worker: dict[str, Any]) -> str:
    restarts = worker["restarts"]
    if not restarts["last_error"]:
        return ""
    return (f"restarted {restarts['count']} time{'' if restarts['count'] == 1 else 's'} after a query failed "
            f"(last failure {restarts['same_in_a_row']} in a row): {restarts['last_error']}")


def _process(view: dict[str, Any]) -> str:
    """A worker's or standby's process, as the checkpoint lock names it."""
    return f"pid {view['pid']} on {view['host']}" if view["host"] else "-"


def _standbys(standbys: list[dict[str, Any]]) -> str:
    ready = sum(1 for s in standbys if s["state"] == "ready")
    return f"{len(standbys)} standby{'' if len(standbys) == 1 else 's'}" + (f" ({ready} ready)" if standbys else "")


def status_view(status: dict[str, Any]) -> RenderableType:
    savepoints = status["savepoints"]
    newest = f" (newest {savepoints['newest_id']}: {savepoints['newest_state']})" if savepoints["count"] else ""
    headline = Text.assemble(
        "Pipeline ", styled(status["state"]),
        f": {status['workers_registered']} of {status['workers_expected']} workers, {_standbys(status['standbys'])}, "
        f"{status['rows_per_second']:.1f} rows/s, input lag {size(status['lag_bytes'])}, "
        f"{savepoints['count']} savepoint{'' if savepoints['count'] == 1 else 's'}{newest}")
    if not status["workers"]:
        return Group(headline, "", Text("No worker has registered yet."))
    workers = table(
        ("WORKER", "PROCESS", "STATE", "BATCH", "ROWS/S", "LAG", "CHECKPOINT", "RECOVERY", "REPORTED"),
        [(w["worker_id"], _process(w), styled(w["state"]), str(w["batch_id"]), f"{w['rows_per_second']:.1f}",
          size(w["lag_bytes"]), _checkpoint(w), _recovery(w), f"{seconds(w['heartbeat_age_s'])} ago")
         for w in status["workers"]],
        right=("BATCH", "ROWS/S", "LAG"))
    sinks = [(w["worker_id"], s) for w in status["workers"] for s in w["sinks"]]
    parts: list[RenderableType] = [headline, "", workers]
    if status["standbys"]:
        parts += ["", table(("STANDBY", "STATE", "REPORTED"),
                            [(_process(s), styled(s["state"]), f"{seconds(s['heartbeat_age_s'])} ago")
                             for s in status["standbys"]])]
    if sinks:
        parts += ["", table(
            ("WORKER", "SINK", "STATE", "PUBLISHED", "PENDING", "LAG", "RETRIES", "TARGET"),
            [(worker, s["name"], styled(s["state"]),
              f"batch {s['published_batch_id']}" if s["published_batch_id"] >= 0 else "-",
              str(s["pending_batches"]), str(s["lag_batches"]), str(s["retries"]),
              f"{s['target']}: {s['error']}, retry in {seconds(s['next_retry_in_s'])}" if s["error"] else s["target"])
             for worker, s in sinks],
            right=("PENDING", "LAG", "RETRIES"))]
    errors = [f"{w['worker_id']}: {message}" for w in status["workers"]
              for message in [w["checkpoint_error"], *(f"{q['name']}: {q['error']}" for q in w["queries"] if q["error"]),
                              _restarts(w)]
              if message]
    parts += [Text(f"error: {line}", style="red") for line in errors]
    return Group(*parts)


def watch(api: ControllerApi, output: Output, waiting: Waiting) -> int:
    """Until Ctrl-C: redraw in place on a terminal, else print each snapshot."""
    console = stdout()
    try:
        if output is Output.TEXT and console.is_terminal:
            with Live(console=console, auto_refresh=False) as live:
                while True:
                    live.update(status_view(api.get("/status")), refresh=True)
                    waiting.sleep(waiting.interval_s)
        first = True
        while True:
            status = api.get("/status")
            if output is Output.JSON:
                print(json.dumps(status), flush=True)
            else:
                emit(status_view(status) if first else Group("", status_view(status)))
            first = False
            waiting.sleep(waiting.interval_s)
    except KeyboardInterrupt:
        return DONE


def add_status_command(app: typer.Typer, settings: CliSettings, waiting: Waiting) -> None:
    @app.command("status")
    def status_command(
            watching: Annotated[bool, typer.Option("--watch", "-w", help="follow it until Ctrl-C")] = False,
            interval: Annotated[float, typer.Option(min=0.1, metavar="SECONDS", help="with --watch: how often")]
            = 2.0,
            controller: ControllerOption = None, output: OutputOption = Output.TEXT) -> int:
        """The pipeline, its workers and their sinks."""
        api = connect(controller, settings)
        if watching:
            return watch(api, output, Waiting(waiting.sleep, waiting.clock, interval))
        status = api.get("/status")
        if output is Output.JSON:
            print_json(status)
        else:
            emit(status_view(status))
        return DONE
