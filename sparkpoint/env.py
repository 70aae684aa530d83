"""Typed reading of ``SP_*`` environment variables.

Each service parses its settings once, in ``main``, into a frozen dataclass.
A bad value raises :class:`SettingsError` naming the variable, which ``main``
prints as one line before exiting -- never a stack trace.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import NoReturn


class SettingsError(ValueError):
    """A configuration value is missing or invalid; the message names it."""

    def __init__(self, variable: str, problem: str) -> None:
        super().__init__(f"{variable}: {problem}")
        self.variable = variable


class Env:
    """Reads typed values from a mapping of environment variables."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ

    def _raw(self, name: str) -> str | None:
        value = self._environ.get(name)
        if value is None or value.strip() == "":
            return None
        return value.strip()

    def string(self, name: str, default: str | None = None) -> str:
        value = self._raw(name)
        if value is None:
            if default is None:
                raise SettingsError(name, "is required but not set")
            return default
        return value

    def integer(self, name: str, default: int, *, minimum: int | None = None,
                maximum: int | None = None, unit: str = "") -> int:
        value = self._raw(name)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            raise SettingsError(name, f"expected an integer{unit and f' ({unit})'}, got {value!r}") from None
        if minimum is not None and number < minimum:
            raise SettingsError(name, f"must be at least {minimum}, got {number}")
        if maximum is not None and number > maximum:
            raise SettingsError(name, f"must be at most {maximum}, got {number}")
        return number

    def port(self, name: str, default: int) -> int:
        return self.integer(name, default, minimum=1, maximum=65535)

    def boolean(self, name: str, default: bool) -> bool:
        value = self._raw(name)
        if value is None:
            return default
        lowered = value.lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise SettingsError(name, f"expected true or false, got {value!r}")

    def path(self, name: str, default: str) -> Path:
        return Path(self.string(name, default)).expanduser()

    def address(self, name: str, default: str) -> str:
        """A ``host:port`` address."""
        value = self.string(name, default)
        host, sep, port = value.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise SettingsError(name, f"expected host:port, got {value!r}")
        return value


def exit_with_error(program: str, error: Exception) -> NoReturn:
    """Print one line naming what is wrong and exit with status 2."""
    print(f"{program}: error: {error}", file=sys.stderr)
    raise SystemExit(2)
