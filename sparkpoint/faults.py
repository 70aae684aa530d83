"""In-process fault sentinels for recovery tests (bytewax's ``testing.py`` idea).

``SP_TEST_FAULT=<point>[:<n>]`` makes the worker fail the ``n``-th time
(default: first) it reaches ``<point>``; a sentinel file in the checkpoint
directory records that it fired, so the restarted worker runs on.

Kill points make the worker SIGKILL itself (and its Spark JVM), like a
container kill: ``checkpoint.blobs_copied`` (files copied, manifest not yet
written), ``checkpoint.manifest_written`` (durable, not yet committed to the
controller), ``publish.files_placed`` (a files sink placed a publish's files,
its mark not yet written), ``publish.postgres_written`` (a transactional
PostgreSQL sink wrote a publish's rows and its mark, COMMIT not yet sent: the
server rolls the transaction back when the connection dies) and a Kafka
sink's ``publish.kafka_begun``, ``publish.kafka_producing`` (its first record
on the broker), ``publish.kafka_produced`` (every record and the mark sent,
not committed) and ``publish.kafka_committed`` (committed, not yet recorded).

Failure points raise ``InjectedFaultError`` instead, failing the query that
reached them while the worker lives on: ``staging.commit`` (a staged sink's
batch written by Spark, not yet renamed into place). Hits are counted in a
file beside the sentinel. ``<point>:<n>:always`` fails every hit from the
``n``-th on (no sentinel): a failure that comes back after every restart.
``<point>:armed`` fails the next hit each time a file ``.fault-<point>.arm``
appears in the directory (the hit removes it): a failure made from outside,
when wanted (``bench/docker_recovery.py`` arms it in a running container).
``<point>@<sink>`` counts only the hits of the sink so named (a publish's
points name their sink): ``publish.postgres_written@bars_pg:3``.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path


class InjectedFaultError(RuntimeError):
    """A failure point fired (tests only)."""


class FaultInjector:
    def __init__(self, spec: str, sentinel_dir: Path) -> None:
        point, _, rest = spec.partition(":")
        nth, _, mode = rest.partition(":")
        self.point = point
        self.nth = int(nth) if nth.isdigit() else 1
        self.always = mode == "always"
        self.armed = nth == "armed"
        self.sentinel = Path(sentinel_dir) / f".fault-{point}"
        self._hits = 0

    def hit(self, point: str, sink: str = "") -> None:
        """A kill point: SIGKILL the worker here, once. ``sink``: the sink
        whose publish reached it (``<point>@<sink>`` counts only its hits)."""
        if not self.point or self.point not in (point, f"{point}@{sink}") or self.sentinel.exists():
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

    def fail(self, point: str, what: str = "") -> None:
        """A failure point: raise ``InjectedFaultError`` here (once, or
        every time from the ``n``-th hit with ``:always``)."""
        if not self.point or point != self.point or (self.sentinel.exists() and not self.always):
            return
        if self.armed:
            try:
                self.sentinel.with_name(self.sentinel.name + ".arm").unlink()
            except FileNotFoundError:
                return
            raise InjectedFaultError(f"fault {point} fired{f' at {what}' if what else ''} (SP_TEST_FAULT, armed)")
        self.sentinel.parent.mkdir(parents=True, exist_ok=True)
        # One byte per hit, appended: the count holds across Spark's Python processes.
        fd = os.open(self.sentinel.with_name(self.sentinel.name + ".hits"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            os.write(fd, b".")
            hits = os.fstat(fd).st_size
        finally:
            os.close(fd)
        if hits < self.nth:
            return
        if not self.always:
            self.sentinel.touch()
        raise InjectedFaultError(f"fault {point} fired{f' at {what}' if what else ''} (SP_TEST_FAULT, hit {hits})")


NO_FAULTS = FaultInjector("", Path("."))
