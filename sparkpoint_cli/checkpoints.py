"""``sparkpoint checkpoints WORKER``: a worker's durable checkpoints as it
last reported them to the controller -- ids, each query's batch, sizes,
age, whether the controller acknowledged them, which savepoints pin them."""

# No `from __future__ import annotations`: typer reads the commands' annotations,
# some of which name values of the enclosing function.

from typing import Annotated, Any

import typer
from rich.console import RenderableType
from rich.text import Text

from sparkpoint.tables import table
from sparkpoint_cli.controller_api import ControllerOption, connect, quoted
from sparkpoint_cli.errors import DONE
from sparkpoint_cli.output import Output, OutputOption, emit, print_json, seconds, size, styled
from sparkpoint_cli.settings import CliSettings


def checkpoints_view(worker: str, listing: list[dict[str, Any]]) -> RenderableType:
    if not listing:
        return Text(f"{worker} holds no durable checkpoints (as it last reported).")
    return table(
        ("CHECKPOINT", "STATE", "BATCHES", "SIZE", "ADDED", "TOOK", "AGE", "PINNED BY"),
        [(str(c["checkpoint"]["checkpoint_id"]), styled("complete" if c["complete"] else "pending"),
          " ".join(f"{query}:{batch}" for query, batch in c["checkpoint"]["batch_ids"].items()) or "-",
          size(c["checkpoint"]["size_bytes"]), size(c["checkpoint"]["bytes_copied"]),
          seconds(c["checkpoint"]["duration_ms"] / 1000), seconds(c["checkpoint"]["age_s"]),
          " ".join(c["pinned_by"]) or "-") for c in listing],
        right=("CHECKPOINT", "SIZE", "ADDED", "TOOK", "AGE"))


def add_checkpoints_command(app: typer.Typer, settings: CliSettings) -> None:
    @app.command("checkpoints")
    def checkpoints_command(worker: Annotated[str, typer.Argument(metavar="WORKER", show_default=False,
                                                                  help="the worker's id, e.g. worker-0")],
                            controller: ControllerOption = None, output: OutputOption = Output.TEXT) -> int:
        """A worker's durable checkpoints, oldest first: ids, batches, sizes, age, pins."""
        listing = connect(controller, settings).get(f"/workers/{quoted(worker)}/checkpoints")
        if output is Output.JSON:
            print_json(listing)
        else:
            emit(checkpoints_view(worker, listing))
        return DONE
