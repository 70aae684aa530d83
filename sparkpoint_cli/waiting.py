"""How the CLI follows something the controller does over time (a savepoint
being taken, an export being written, ``status --watch``): polling at an
interval, with a deadline. Tests replace the clock and the sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from sparkpoint_cli.output import stderr

View = TypeVar("View")


@dataclass(frozen=True)
class Waiting:
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    interval_s: float = 0.5

    def follow(self, fetch: Callable[[], View], done: Callable[[View], bool], timeout_s: float, *,
               describe: Callable[[View], str], counts: Callable[[View], tuple[int, int]]) -> View | None:
        """Fetch until ``done``; None if the deadline passes first. On a
        terminal a progress bar shows ``counts`` (completed, total); elsewhere
        ``describe`` is printed on stderr whenever it changes."""
        console = stderr()
        deadline = self.clock() + timeout_s
        if not console.is_terminal:
            shown = ""

            def show(view: View) -> None:
                nonlocal shown
                if (line := describe(view)) != shown:
                    console.print(line, markup=False)
                    shown = line
            return self._poll(fetch, done, deadline, show)
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console, transient=False) as progress:
            task = progress.add_task("", total=None)

            def advance(view: View) -> None:
                completed, total = counts(view)
                progress.update(task, description=describe(view), completed=completed, total=total)
            return self._poll(fetch, done, deadline, advance)

    def _poll(self, fetch: Callable[[], View], done: Callable[[View], bool], deadline: float,
              show: Callable[[View], None]) -> View | None:
        while True:
            view = fetch()
            show(view)
            if done(view):
                return view
            if self.clock() >= deadline:
                return None
            self.sleep(self.interval_s)
