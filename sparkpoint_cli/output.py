"""How every command prints: text for people (rich: tables, colour on a
terminal, plain when piped), or ``--output json`` for scripts (the
controller's JSON as it answered, or the command's result)."""

from __future__ import annotations

import enum
import json
import sys
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.console import Console, RenderableType
from rich.text import Text

from sparkpoint.tables import to_text


class Output(str, enum.Enum):
    TEXT = "text"
    JSON = "json"


OutputOption = Annotated[Output, typer.Option("--output", "-o", help="text for people, json for scripts")]

# When stdout is not a terminal, lines are as long as their content: a table
# piped to a file or grep is never wrapped at 80 columns.
_PIPE_WIDTH = 1000


def stdout() -> Console:
    """Standard output at the time of the call (tests capture it)."""
    return Console(highlight=False, emoji=False, width=None if sys.stdout.isatty() else _PIPE_WIDTH)


def stderr() -> Console:
    return Console(stderr=True, highlight=False, emoji=False,
                   width=None if sys.stderr.isatty() else _PIPE_WIDTH)


def emit(renderable: RenderableType) -> None:
    """Print for people: with colour on a terminal; plain, without trailing
    spaces, when piped (a string is printed as it is, never read as markup)."""
    console = stdout()
    if isinstance(renderable, str):
        renderable = Text(renderable)
    if console.is_terminal:
        console.print(renderable)
    else:
        print(to_text(renderable, width=_PIPE_WIDTH))


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


def show(output: Output, view: Any, text: RenderableType) -> None:
    """The controller's answer as JSON, or ``text`` for people (a string is
    printed as it is, never read as markup)."""
    if output is Output.JSON:
        print_json(view)
    else:
        emit(text)


# -- values as people read them ---------------------------------------------------------
STATE_STYLES = {"running": "green", "ok": "green", "complete": "green", "recovering": "yellow", "restarting": "yellow", "waiting": "yellow",
                "pending": "yellow", "starting": "cyan", "failed": "bold red", "finished": "dim"}


def styled(state: str) -> Text:
    """A state in its colour (plain when not a terminal)."""
    return Text(state, style=STATE_STYLES.get(state, ""))


def size(value: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def seconds(value: float) -> str:
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.1f} s"
    if value < 7200:
        return f"{value / 60:.0f} min"
    return f"{value / 3600:.1f} h"


def when(timestamp: float | None) -> str:
    return "" if timestamp is None else datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
