"""Errors as one line for logs and status: never a traceback."""

from __future__ import annotations


def describe_error(error: BaseException) -> str:
    """The error's type and the first line of its message."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
