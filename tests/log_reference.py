"""The reference the log's scans are checked against (the worker's Python
``committed_end`` and the JVM source's ``PartitionEnd``): records drawn by
hypothesis, and where each record and a capped batch end, found the slow way."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from hypothesis import strategies as st

# Records: short runs of non-newline bytes, each ending in a newline.
records = st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"x") + b"\n"), max_size=40)
# A torn record: bytes without a newline.
torn_tails = st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"y"))


def record_ends(data: bytes) -> list[int]:
    """The offset after each complete record of ``data``."""
    return [i + 1 for i, byte in enumerate(data) if byte == ord("\n")]


def expected_batch_end(data: bytes, start: int, cap: int | None) -> int:
    after = [end for end in record_ends(data) if end > start]
    if not after:
        return start
    return after[-1] if cap is None else after[min(cap, len(after)) - 1]


def append_in_chunks(path: Path, data: bytes, cuts: list[int]) -> Iterator[bytes]:
    """Append ``data`` to ``path`` in chunks ending at each of ``cuts`` (and
    at its end: records split anywhere); after each, yield what is written."""
    written = 0
    for bound in sorted({min(c, len(data)) for c in cuts} | {len(data)}):
        with open(path, "ab") as f:
            f.write(data[written:bound])
        written = bound
        yield data[:bound]
