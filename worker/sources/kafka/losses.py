"""The data losses a Kafka source went on past (``fail_on_data_loss=False``).

Kept in a file of the query's own on the worker's checkpoint volume: the
reader appends each loss as it plans the batch that skips it (in Spark's
Python process), the worker counts them for ``/metrics``. A batch planned
again after a crash may append a loss twice: it is counted once, by where
the lost range began.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

from worker.sources.kafka.offsets import DataLoss

FILE = "kafka-data-losses.jsonl"


def losses_file(directory: Path) -> Path:
    """The file of the query whose own directory is ``directory``."""
    return directory / FILE


def record(path: Path, losses: Iterable[DataLoss]) -> None:
    lines = "".join(json.dumps(asdict(loss)) + "\n" for loss in losses)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as file:
        file.write(lines)


def count(path: Path) -> int:
    """The distinct losses recorded (0: none, or no file)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return 0
    seen = set()
    for line in text.splitlines():
        try:
            loss = json.loads(line)
            seen.add((loss["topic"], loss["partition"], loss["expected"]))
        except (ValueError, KeyError, TypeError):
            continue        # a line torn by a crash mid-append
    return len(seen)
