"""Shared by the benchmark scripts: table rows and where a table goes."""

from __future__ import annotations

import json
import statistics
import string
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def python_loop_s(additions: int = 20_000_000) -> float:
    """The machine's speed as the results' notes quote it: wall seconds of
    a Python loop of ``additions`` additions (1.0-2.3 s on the 2-core
    machines so far; the same code's figures move with it)."""
    started = time.perf_counter()
    total = 0
    for i in range(additions):
        total += i
    return time.perf_counter() - started


def overrides_text(overrides: dict[str, str]) -> str:
    """The settings a run overrode (``--set``), as a results note names them."""
    return ", ".join(f"{k}={v}" for k, v in overrides.items()) or "none"


def spread_row(label: str, values: list[float], fmt: str) -> str:
    """``| label | median | min | max |`` with each figure formatted by ``fmt``."""
    return (f"| {label} | {statistics.median(values):{fmt}} | {min(values):{fmt}} "
            f"| {max(values):{fmt}} |")


def unused_name(name: str, results: Path = RESULTS) -> str:
    """``name``, else ``name-b``, ``name-c``, …: the first that names no
    result yet (a run never overwrites one kept in the repository)."""
    for suffix in ("", *(f"-{letter}" for letter in string.ascii_lowercase[1:])):
        if not any((results / f"{name}{suffix}{ext}").exists() for ext in (".md", ".json")):
            return name + suffix
    raise FileExistsError(f"{results}: {name} and each of its suffixes -b..-z are taken")


def publish_table(name: str, lines: list[str]) -> None:
    """Print the table and write it to ``bench/results/<name>.md``."""
    table = "\n".join(lines)
    print(table)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.md").write_text(table + "\n")


def publish_json(name: str, data: dict) -> Path:
    """Write ``data`` with the command line, the commit and the time to
    ``bench/results/<name>.json``; returns the path."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=RESULTS.parent, capture_output=True,
                            text=True).stdout.strip()
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"command": " ".join(sys.argv), "commit": commit,
                                "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **data}, indent=2) + "\n")
    return path
