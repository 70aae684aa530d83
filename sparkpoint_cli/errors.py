"""Exit statuses and the errors every ``sparkpoint`` command reports as one line."""

from __future__ import annotations

# 0: done (or the restore would go ahead); 2: refused (a plan that would be
# refused, a request the controller refused); 1: the command could not run.
DONE, FAILED, REFUSED = 0, 1, 2


class CommandError(Exception):
    """The command cannot run; one line says why (exit status 1)."""


class Refused(Exception):
    """The controller refused the request (HTTP 409); the message is its reason (exit status 2)."""
