"""``sparkpoint``: the command-line tool.

\b
  status       the pipeline, its workers and their sinks (--watch to follow)
  checkpoints  a worker's durable checkpoints
  plan         what restoring a checkpoint or a savepoint into a changed
               pipeline would keep, start fresh, drop or refuse
  savepoint    create, list, show, restore, dispose, export and import
               savepoints
  worker       release a dead worker's index

Every command but plan (with a checkpoint directory) talks to the controller's
REST API: --controller URL, else SP_CONTROLLER_URL, else http://localhost:8080.
--output json prints JSON for scripts.

Exit status: 0 done (or the restore would go ahead), 2 refused (a plan that
would be refused, or a request the controller refused), 1 the command could
not run (bad arguments, a missing file, an unreachable controller).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import NoReturn

import typer

from sparkpoint.settings import SettingsError
from sparkpoint_cli.checkpoints import add_checkpoints_command
from sparkpoint_cli.errors import DONE, FAILED, REFUSED, CommandError, Refused
from sparkpoint_cli.plan import Derive, add_plan_command, spark_schemas
from sparkpoint_cli.savepoint import savepoint_app
from sparkpoint_cli.settings import CliSettings
from sparkpoint_cli.status import add_status_command
from sparkpoint_cli.waiting import Waiting
from sparkpoint_cli.worker import worker_app

PROGRAM = "sparkpoint"


def application(settings: CliSettings, derive: Derive, waiting: Waiting) -> typer.Typer:
    app = typer.Typer(name=PROGRAM, help=__doc__, add_completion=False,
                      pretty_exceptions_enable=False, rich_markup_mode=None)
    add_status_command(app, settings, waiting)
    add_checkpoints_command(app, settings)
    add_plan_command(app, settings, derive)
    app.add_typer(savepoint_app(settings, waiting), name="savepoint",
                  help="create, list, show, restore, dispose, export and import savepoints")
    app.add_typer(worker_app(settings), name="worker", help="release a dead worker's index")
    return app


def _usage_error(error: typer.TyperException) -> NoReturn:
    """Bad usage is exit status 1 (2 means "refused" here): the usage, then one line."""
    context = getattr(error, "ctx", None)
    if context is not None:
        print(context.get_usage(), file=sys.stderr)
    where = context.command_path if context is not None else PROGRAM
    print(f"{where}: error: {error.format_message()}", file=sys.stderr)
    raise SystemExit(FAILED)


def main(argv: Sequence[str] | None = None, *, derive: Derive = spark_schemas,
         waiting: Waiting | None = None) -> NoReturn:
    """``derive`` and ``waiting`` let tests replace Spark and the clock."""
    try:
        command = typer.main.get_command(application(CliSettings.from_env(os.environ), derive, waiting or Waiting()))
        result = command.main(args=list(sys.argv[1:] if argv is None else argv), prog_name=PROGRAM,
                              standalone_mode=False)
        raise SystemExit(result if isinstance(result, int) else DONE)
    except typer.Exit as done:       # --help
        raise SystemExit(done.exit_code) from None
    except typer.TyperException as error:     # bad usage (typer's own click: its errors derive from this)
        _usage_error(error)
    except typer.Abort:
        print(f"{PROGRAM}: interrupted", file=sys.stderr)
        raise SystemExit(FAILED) from None
    except (CommandError, SettingsError) as error:
        print(f"{PROGRAM}: error: {error}", file=sys.stderr)
        raise SystemExit(FAILED) from None
    except Refused as refusal:
        print(f"{PROGRAM}: refused: {refusal}", file=sys.stderr)
        raise SystemExit(REFUSED) from None
