"""Pure arithmetic shared by the benchmarks: rates from progress, percentiles,
CPU from cumulative usage. No I/O here (tested in tests/unit/test_bench_measure.py)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from datetime import datetime


def percentile(values: list[float], q: float) -> float:
    """The value at quantile ``q`` (nearest rank, no interpolation); NaN if empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass(frozen=True)
class Rate:
    """Events/s after start-up: ``events`` processed between the end of the
    first batch with rows (``start``) and the last one (``end``), seconds."""

    events: int
    start: float
    end: float
    partial: bool = False       # cut off before the whole input was processed

    @property
    def per_second(self) -> float:
        return self.events / (self.end - self.start) if self.end > self.start else float("nan")


# -- Spark: StreamingQueryProgress JSON, one list per query -------------------------------

def batch_end(progress: dict) -> float:
    """When a batch finished: its trigger's start plus its execution time."""
    started = datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()
    return started + progress["durationMs"]["triggerExecution"] / 1000


def spark_rate(queries: dict[str, list[dict]]) -> Rate:
    """An event counts as processed once every query has processed it, so:
    from the moment every query has finished its first batch with rows to
    the moment the last query finished its last one, the events no query had
    yet processed at the start. With one batch in all: that batch's own rate."""
    batches = {name: sorted((batch_end(p), p["numInputRows"], p["durationMs"]["triggerExecution"] / 1000)
                            for p in progresses if p.get("numInputRows", 0) > 0)
               for name, progresses in queries.items()}
    if not batches or any(not b for b in batches.values()):
        raise ValueError("a query processed no rows")
    total = min(sum(rows for _, rows, _ in b) for b in batches.values())
    start = max(b[0][0] for b in batches.values())
    end = max(b[-1][0] for b in batches.values())
    if end == start:    # one batch each: measure the slowest query's batch itself
        slowest = max((b[0] for b in batches.values()), key=lambda batch: batch[2])
        return Rate(total, slowest[0] - slowest[2], slowest[0])
    done = min(sum(rows for at, rows, _ in b if at <= start) for b in batches.values())
    return Rate(total - done, start, end)


# -- Sparkpoint: the controller's /status, polled ---------------------------------------

@dataclass(frozen=True)
class StatusPoll:
    at: float                   # when it was read (monotonic seconds)
    rows: int                   # the worker's rows_processed (its slowest query's)
    at_end: bool                # every query's offsets are at the input's end


def polled_rate(polls: list[StatusPoll]) -> Rate:
    """From the first poll showing rows to the first showing the whole input
    read (or the last poll, marked partial). Both ends see the worker's
    report equally late, so the report interval's delay cancels on average;
    but both see reports, which come a report interval apart, so the time is
    a whole number of report intervals: its resolution is the caller's
    ``SP_REPORT_INTERVAL``."""
    started = next((p for p in polls if p.rows > 0), None)
    if started is None:
        raise ValueError("no poll showed a processed row")
    finished = next((p for p in polls if p.at_end and p.at >= started.at), None)
    last = finished or polls[-1]
    return Rate(last.rows - started.rows, started.at, last.at, partial=finished is None)


# -- CPU: cumulative usage in nanoseconds, sampled -------------------------------------

def cores_used(samples: list[tuple[float, int]]) -> float:
    """Average cores over ``(seconds, cumulative CPU ns)`` samples, first to last."""
    (t0, u0), (t1, u1) = samples[0], samples[-1]
    return (u1 - u0) / 1e9 / (t1 - t0) if t1 > t0 else float("nan")


def peak_cores(samples: list[tuple[float, int]], window_s: float) -> float:
    """The highest average over consecutive spans of at least ``window_s``."""
    best = float("nan")
    j = 0
    for i in range(len(samples)):
        while j < len(samples) and samples[j][0] - samples[i][0] < window_s:
            j += 1
        if j == len(samples):
            break
        cores = cores_used([samples[i], samples[j]])
        best = cores if best != best or cores > best else best
    return best


# -- CPU by thread: where a worker's time goes -------------------------------------------

JIT = "JIT compiler"
# What the worker JVM's threads do, by the start of their names as /proc shows
# them (15 characters at most); the first match wins.
THREAD_GROUPS = (
    ("stream executio", "query threads (planning, offsets, commits)"),
    ("Executor task", "tasks"),
    ("dag-scheduler", "scheduling"),
    ("task-result-get", "scheduling"),
    ("dispatcher-", "scheduling"),
    ("C1 CompilerThre", JIT),
    ("C2 CompilerThre", JIT),
    ("GC Thread", "garbage collector"),
    ("G1 ", "garbage collector"),
    ("spark-listener-", "listeners"),
    ("element-trackin", "listeners"),
)
OTHER_JVM = "JVM, other threads"


def thread_stat(stat: str) -> tuple[str, int]:
    """A thread's name and CPU ticks (user + system) from its
    ``/proc/<pid>/task/<tid>/stat`` line (the name, in parentheses, may hold
    spaces and parentheses itself)."""
    fields = stat[stat.rindex(")") + 2:].split()
    return stat[stat.index("(") + 1:stat.rindex(")")], int(fields[11]) + int(fields[12])


def thread_group(process: str, thread: str) -> str:
    """The group of a thread of a worker container's process (``comm`` of each)."""
    if process != "java":
        return "Python" if process.startswith("python") else "other processes"
    return next((group for prefix, group in THREAD_GROUPS if thread.startswith(prefix)), OTHER_JVM)


def cpu_by_group(before: dict[tuple, tuple[str, str, int]], after: dict[tuple, tuple[str, str, int]],
                 ticks_per_s: int, seconds: float) -> dict[str, float]:
    """Cores per ``thread_group`` between two snapshots of ``{thread id: (process,
    thread, cumulative CPU ticks)}``; a thread that started in between counts from 0."""
    cores: dict[str, float] = {}
    for key, (process, thread, ticks) in after.items():
        used = ticks - before.get(key, (process, thread, 0))[2]
        group = thread_group(process, thread)
        cores[group] = cores.get(group, 0.0) + used / ticks_per_s / seconds
    return dict(sorted(cores.items(), key=lambda item: -item[1]))


# -- memory: a container's cgroup, sampled -------------------------------------------------

def memory_in_use(usage: int, stat: dict[str, int]) -> int:
    """A container's memory as ``docker stats`` shows it: the cgroup's usage
    minus its inactive page cache (file pages the kernel reclaims before it
    would kill anything). ``stat``: memory.stat's counters (cgroup v1 names
    them ``total_inactive_file``, v2 ``inactive_file``)."""
    return usage - stat.get("total_inactive_file", stat.get("inactive_file", 0))


# -- latency through an upsert sink ------------------------------------------------------

def upsert_latencies(counts: dict[str, list[tuple[int, float]]], times: dict[str, list[float]],
                     since: float, until: float = float("inf")) -> list[float]:
    """Seconds from each event's append to when its symbol's row first counted
    it. ``counts``: per symbol, ``(count, first seen)`` each time the count
    grew; ``times``: per symbol, its events' append times in order (a count
    ``c`` covers the symbol's first ``c`` events). Only events appended in
    ``[since, until]``, and only those some count covered."""
    result = []
    for sym, shown in counts.items():
        seen = [count for count, _ in shown]
        for rank, appended in enumerate(times.get(sym, []), start=1):
            if since <= appended <= until:
                at = bisect.bisect_left(seen, rank)
                if at < len(shown):
                    result.append(shown[at][1] - appended)
    return result
