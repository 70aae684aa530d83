"""``sparkpoint worker release ID``: forget a worker that is gone for good.

The controller keeps each worker's index for it, so a worker that will not
come back (its machine is lost) blocks another worker id from taking its
index. Releasing it frees the index; the controller refuses while the
worker still reports. The next worker on that index starts from its own
checkpoints, and its sinks' marks are its own.

The controller's address: --controller URL, else SP_CONTROLLER_URL, else
http://localhost:8080.
"""

from __future__ import annotations

import argparse
import urllib.parse

from sparkpoint_cli.controller_api import ControllerApi, controller_of, controller_option
from sparkpoint_cli.errors import DONE


def release(api: ControllerApi, args: argparse.Namespace) -> int:
    released = api.post(f"/workers/{urllib.parse.quote(args.id, safe='')}/release", {})
    print(f"Released {released['worker_id']}: worker index {released['worker_index']} is free for another "
          f"worker id (its last checkpoint was {released['last_checkpoint_id'] or 'none'}).")
    return DONE


def add_worker_command(commands: argparse._SubParsersAction, environ: dict[str, str]) -> None:
    group = commands.add_parser("worker", help="release a dead worker's index", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = group.add_subparsers(dest="action", required=True, parser_class=type(group))
    parser = actions.add_parser("release", parents=[controller_option()],
                                help="forget a worker that is gone for good: its index is free")
    parser.add_argument("id", help="the worker's id (SP_WORKER_ID)")
    parser.set_defaults(run=lambda args: release(controller_of(args, environ), args))
