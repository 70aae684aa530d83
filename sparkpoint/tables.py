"""Tables in one house style, for terminals and logs (rich): bold upper-case
headers, columns two spaces apart, no borders, numbers right-aligned -- the
way kubectl prints. ``to_text`` renders any of them as plain text for a log."""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text


def table(headers: Sequence[str], rows: Iterable[Sequence[RenderableType]] = (), *,
          right: Iterable[str] = ()) -> Table:
    """A table with ``headers``; the columns named in ``right`` are right-aligned.
    Text cells are shown as they are (never read as rich markup)."""
    aligned = set(right)
    grid = Table(box=None, show_edge=False, pad_edge=False, padding=(0, 2, 0, 0), header_style="bold",
                 collapse_padding=True)
    for header in headers:
        grid.add_column(header, justify="right" if header in aligned else "left", no_wrap=True)
    for row in rows:
        grid.add_row(*(Text(cell) if isinstance(cell, str) else cell for cell in row))
    return grid


def to_text(*renderables: RenderableType, width: int = 240) -> str:
    """Plain text (no colour, no trailing spaces), as a log or a pipe wants it."""
    buffer = io.StringIO()
    Console(file=buffer, width=width, color_system=None, highlight=False, emoji=False).print(*renderables)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())
