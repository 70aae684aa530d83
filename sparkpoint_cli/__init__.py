"""``sparkpoint``: the command-line tool.

  plan        what restoring a checkpoint into a changed pipeline would keep,
              start fresh, drop or refuse (reads files; no controller needed)
  savepoint   create, list, show, restore, dispose, export and import
              savepoints through the controller's REST API
  worker      release a dead worker's index (REST)

Exit status: 0 done (or the restore would go ahead), 2 refused (a plan that
would be refused, or a request the controller refused), 1 the command could
not run (bad arguments, a missing file, an unreachable controller).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from sparkpoint.env import SettingsError
from sparkpoint_cli.errors import FAILED, REFUSED, CommandError, Refused
from sparkpoint_cli.plan import Derive, add_plan_command, spark_schemas
from sparkpoint_cli.savepoint import Waiting, add_savepoint_command
from sparkpoint_cli.worker import add_worker_command

PROGRAM = "sparkpoint"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse exits 2 on bad usage, which here means "refused".
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(FAILED)


def parser(environ: dict[str, str], derive: Derive, waiting: Waiting) -> argparse.ArgumentParser:
    top = _Parser(prog=PROGRAM, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = top.add_subparsers(dest="command", required=True, parser_class=_Parser)
    add_plan_command(commands, environ, derive)
    add_savepoint_command(commands, environ, waiting)
    add_worker_command(commands, environ)
    return top


def main(argv: Sequence[str] | None = None, *, derive: Derive = spark_schemas,
         waiting: Waiting | None = None) -> NoReturn:
    """``derive`` and ``waiting`` let tests replace Spark and the clock."""
    try:
        args = parser(dict(os.environ), derive, waiting or Waiting()).parse_args(argv)
        raise SystemExit(args.run(args))
    except (CommandError, SettingsError) as error:
        print(f"{PROGRAM}: error: {error}", file=sys.stderr)
        raise SystemExit(FAILED) from None
    except Refused as refusal:
        print(f"{PROGRAM}: refused: {refusal}", file=sys.stderr)
        raise SystemExit(REFUSED) from None
