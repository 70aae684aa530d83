"""Errors as one line for logs and status: never a traceback, never a whole
input echoed back."""

from __future__ import annotations


def describe_error(error: BaseException) -> str:
    """The error's type and the first line of its message."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def clip(text: str, limit: int) -> str:
    """``text``, cut to at most ``limit`` characters (the cut marked)."""
    return text if len(text) <= limit else text[:max(0, limit - 1)] + "…"


def shown(value: object, limit: int = 40) -> str:
    """``value`` as an error message quotes it: its repr, cut after ``limit``
    characters of the value, with its length when cut."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]!r}… ({len(value)} characters)"
    return clip(repr(value), limit + 2)
