"""In-process fault sentinels for recovery tests (bytewax's ``testing.py`` idea).

``SP_TEST_FAULT=<point>[:<n>]`` makes the worker SIGKILL itself (and its
Spark JVM) the ``n``-th time (default: first) it reaches ``<point>``; a
sentinel file in the checkpoint directory records that it fired, so the
restarted worker runs on. Points:
``checkpoint.blobs_copied`` (files copied, manifest not yet written),
``checkpoint.manifest_written`` (durable, not yet committed to the controller),
``publish.files_placed`` (a files sink placed a publish's files, its mark
not yet written) and ``publish.postgres_written`` (a transactional PostgreSQL
sink wrote a publish's rows and its mark, COMMIT not yet sent: the server
rolls the transaction back when the connection dies).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path


class FaultInjector:
    def __init__(self, spec: str, sentinel_dir: Path) -> None:
        point, _, nth = spec.partition(":")
        self.point = point
        self.nth = int(nth) if nth.isdigit() else 1
        self.sentinel = Path(sentinel_dir) / f".fault-{point}"
        self._hits = 0

    def hit(self, point: str) -> None:
        if not self.point or point != self.point or self.sentinel.exists():
            return
        self._hits += 1
        if self._hits < self.nth:
            return
        self.sentinel.parent.mkdir(parents=True, exist_ok=True)
        self.sentinel.touch()
        # Like a container kill: take Spark's JVM down too when we lead the group.
        if os.getpgrp() == os.getpid():
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


NO_FAULTS = FaultInjector("", Path("."))
