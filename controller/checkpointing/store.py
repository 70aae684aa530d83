"""Where the controller keeps its checkpoint: one JSON file, replaced atomically."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sparkpoint.fileio import atomic_write

log = logging.getLogger("sparkpoint.controller.checkpoint")

FILE_NAME = "controller-checkpoint.json"


class ControllerCheckpointError(ValueError):
    """The controller's checkpoint exists but cannot be read; names the file."""


class ControllerCheckpointStore:
    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / FILE_NAME

    def save(self, snapshot: dict[str, Any]) -> None:
        """Temp file, fsync, rename, fsync the directory: never a torn checkpoint."""
        atomic_write(self.path, json.dumps({"version": 1, "state": snapshot}).encode())

    def load(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except ValueError as error:
            raise ControllerCheckpointError(f"{self.path}: not a valid controller checkpoint ({error})") from None
        if not isinstance(data, dict) or data.get("version") != 1 or not isinstance(data.get("state"), dict):
            raise ControllerCheckpointError(f"{self.path}: not a valid controller checkpoint")
        return data["state"]


class PeriodicCheckpointer:
    """Writes ``snapshot()`` every ``frequency_ms`` on its own thread; a last
    one on stop."""

    def __init__(self, store: ControllerCheckpointStore, snapshot: Callable[[], dict[str, Any]],
                 frequency_ms: int) -> None:
        self._store = store
        self._snapshot = snapshot
        self._frequency_s = frequency_ms / 1000
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sparkpoint-controller-ckpt", daemon=True)
        self.written = 0
        self.error = ""     # the last write's failure; empty once a write succeeds

    def start(self) -> None:
        self._thread.start()

    def checkpoint(self) -> None:
        try:
            self._store.save(self._snapshot())
            self.written += 1
            self.error = ""
        except OSError as error:
            self.error = f"cannot write the controller checkpoint {self._store.path}: {error.strerror or error}"
            log.error("%s", self.error)

    def problems(self) -> list[str]:
        """For ``/health``: the last write failed."""
        return [self.error] if self.error else []

    def _run(self) -> None:
        while not self._stop.wait(self._frequency_s):
            self.checkpoint()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.checkpoint()
