"""One query of a one-branch pipeline on real Spark, built as the worker
builds it (``queries.query_frame``) over an event log it feeds in batches:
what the query emits, batch by batch, and the late rows counted per node as
the worker counts them (the ``run`` fixture, tests/integration/conftest.py)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

from sparkpoint.eventlog import EventLog
from worker import api as sp
from worker.runtime.progress import ProgressTracker, stateful_operators
from worker.runtime.queries import output_mode, query_frame
from worker.settings import WorkerSettings

SCHEMA = "id long, sym string, size long, time timestamp"
EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)


def event(event_id: int, sym: str, size: int, second: float) -> dict:
    stamp = (EPOCH + timedelta(seconds=second)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return {"id": event_id, "sym": sym, "size": size, "time": stamp}


class Run:
    """One query of a one-branch pipeline over a fresh log; ``feed`` appends
    events and runs every batch they make; ``rows`` is what it emitted, in
    order; ``late`` the late rows counted per node, as the worker counts them."""

    def __init__(self, spark, root: Path, stream: sp.Stream, **env: str) -> None:
        self.root = root
        self.pipeline = sp.Pipeline.of(stream | sp.write.to_console(name="out"))
        [query] = self.pipeline.queries()
        self.log = EventLog.create(root / "log" / "trades", 1)
        settings = WorkerSettings.from_env({"SP_LOG_DIR": str(root / "log"), "SP_WORK_DIR": str(root / "work"),
                                            "SP_MAX_RECORDS_PER_BATCH": "0", **env})
        self.tracker = ProgressTracker(stateful_operators(self.pipeline))
        self.tracker.started("out")
        self.batches: list[list[dict]] = []
        frame = query_frame(spark, query, settings, None, root / "records")
        self.query = (frame.writeStream.queryName("out").outputMode(output_mode(query))
                      .option("checkpointLocation", str(root / "checkpoint"))
                      .foreachBatch(lambda batch, _: self.batches.append([r.asDict() for r in batch.collect()]))
                      .start())
        self._seen = -1

    def feed(self, events: list[dict]) -> list[dict]:
        """Append ``events`` and run every batch they make (and the batch
        without data a moved watermark adds); returns the rows emitted."""
        before = len(self.rows)
        self.log.append(0, events)
        self.query.processAllAvailable()
        for progress in self.query.recentProgress:
            if progress["batchId"] > self._seen:
                self.tracker.on_progress(progress)
                self._seen = progress["batchId"]
        return self.rows[before:]

    @property
    def rows(self) -> list[dict]:
        return [row for batch in self.batches for row in batch]

    @property
    def late(self) -> dict[str, int]:
        return self.tracker.snapshot()[0].late_rows

    def stop(self) -> None:
        self.query.stop()
