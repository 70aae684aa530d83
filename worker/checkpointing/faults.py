"""In-process fault sentinels for recovery tests (bytewax's ``testing.py`` idea).

``SP_TEST_FAULT=<point>`` makes the worker SIGKILL itself the first time it
reaches ``<point>``; a sentinel file in the checkpoint directory records that
it happened, so the restarted worker runs on. Points:
``checkpoint.blobs_copied`` (blobs written, manifest not yet),
``checkpoint.manifest_written`` (durable, not yet committed to the controller).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path


class FaultInjector:
    def __init__(self, point: str, sentinel_dir: Path) -> None:
        self.point = point
        self.sentinel = Path(sentinel_dir) / f".fault-{point}"

    def hit(self, point: str) -> None:
        if not self.point or point != self.point or self.sentinel.exists():
            return
        self.sentinel.parent.mkdir(parents=True, exist_ok=True)
        self.sentinel.touch()
        # Like a container kill: take Spark's JVM down too when we lead the group.
        if os.getpgrp() == os.getpid():
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


NO_FAULTS = FaultInjector("", Path("."))
