"""``sparkpoint worker release ID``: forget a worker that is gone for good.

The controller keeps each worker's index for it, so a worker that will not
come back (its machine is lost) blocks another worker id from taking its
index. Releasing it frees the index; the controller refuses (exit 2) while
the worker still reports. The next worker on that index starts from its own
checkpoints, and its sinks' marks are its own.

The controller's address: --controller URL, else SP_CONTROLLER_URL, else
http://localhost:8080. ``--output json`` prints the controller's answer.
"""

# No `from __future__ import annotations`: typer reads the commands' annotations,
# some of which name values of the enclosing function.

from typing import Annotated

import typer

from sparkpoint_cli.controller_api import ControllerOption, connect, quoted
from sparkpoint_cli.errors import DONE
from sparkpoint_cli.output import Output, OutputOption, show
from sparkpoint_cli.settings import CliSettings


def worker_app(settings: CliSettings) -> typer.Typer:
    app = typer.Typer(help=__doc__, rich_markup_mode=None)

    @app.command("release")
    def release_command(worker: Annotated[str, typer.Argument(metavar="ID", show_default=False,
                                                              help="the worker's id (SP_WORKER_ID)")],
                        controller: ControllerOption = None, output: OutputOption = Output.TEXT) -> int:
        """Forget a worker that is gone for good: its index is free for another worker id."""
        released = connect(controller, settings).post(f"/workers/{quoted(worker)}/release", {})
        show(output, released, f"Released {released['worker_id']}: worker index {released['worker_index']} is free "
                               f"for another worker id (its last checkpoint was "
                               f"{released['last_checkpoint_id'] or 'none'}).")
        return DONE

    return app
