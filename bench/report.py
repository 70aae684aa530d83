"""Shared by the benchmark scripts: table rows and where a table goes."""

from __future__ import annotations

import statistics
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def spread_row(label: str, values: list[float], fmt: str) -> str:
    """``| label | median | min | max |`` with each figure formatted by ``fmt``."""
    return (f"| {label} | {statistics.median(values):{fmt}} | {min(values):{fmt}} "
            f"| {max(values):{fmt}} |")


def publish_table(name: str, lines: list[str]) -> None:
    """Print the table and write it to ``bench/results/<name>.md``."""
    table = "\n".join(lines)
    print(table)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.md").write_text(table + "\n")
