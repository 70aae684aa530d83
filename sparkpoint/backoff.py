"""Exponential backoff with a cap; pure, so tests need no sleeps."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Backoff:
    initial_s: float = 0.2
    maximum_s: float = 5.0
    factor: float = 2.0
    _next: float | None = None

    def next_delay(self) -> float:
        delay = self.initial_s if self._next is None else self._next
        self._next = min(self.maximum_s, delay * self.factor)
        return delay

    def reset(self) -> None:
        self._next = None
