"""The benchmarks' arithmetic (bench/measure.py): rates from Spark's progress
and from polled status, CPU from cumulative usage and by thread, memory in use,
upsert latencies."""

import math

import pytest

from bench.measure import (
    StatusPoll,
    cores_used,
    cpu_by_group,
    memory_in_use,
    peak_cores,
    percentile,
    polled_rate,
    spark_rate,
    thread_group,
    thread_stat,
    upsert_latencies,
)


def progress(start_s: float, duration_ms: int, rows: int) -> dict:
    """A StreamingQueryProgress as JSON: a trigger starting ``start_s`` seconds after 12:00:00 UTC."""
    whole, millis = divmod(round(start_s * 1000), 1000)
    return {"timestamp": f"2026-01-01T12:00:{whole:02d}.{millis:03d}Z", "numInputRows": rows,
            "durationMs": {"triggerExecution": duration_ms}}


def test_spark_rate_counts_from_the_slowest_querys_first_batch_to_the_last_batch():
    rate = spark_rate({
        "a": [progress(0, 0, 0), progress(1, 2000, 100), progress(3, 1000, 100), progress(4, 1000, 100)],
        "b": [progress(1, 3000, 100), progress(4, 2000, 200)],
    })
    # Every query has its first batch done at 12:00:04: a had done 200 rows, b 100, so 200 remain.
    # The last batch ends at 12:00:06.
    assert (rate.events, rate.end - rate.start) == (200, pytest.approx(2.0))
    assert rate.per_second == pytest.approx(100.0)
    assert not rate.partial


def test_spark_rate_of_a_single_batch_is_that_batchs_own():
    rate = spark_rate({"a": [progress(0, 500, 50)], "b": [progress(0, 2000, 50)]})
    assert rate.per_second == pytest.approx(25.0)


def test_spark_rate_needs_rows_in_every_query():
    with pytest.raises(ValueError):
        spark_rate({"a": [progress(0, 500, 50)], "b": [progress(0, 100, 0)]})


def test_polled_rate_runs_from_the_first_rows_to_the_whole_input():
    polls = [StatusPoll(0.0, 0, False), StatusPoll(1.0, 10, False), StatusPoll(2.0, 50, False),
             StatusPoll(3.0, 110, True), StatusPoll(4.0, 110, True)]
    rate = polled_rate(polls)
    assert (rate.events, rate.start, rate.end, rate.partial) == (100, 1.0, 3.0, False)


def test_polled_rate_cut_off_is_measured_to_the_last_poll_and_partial():
    rate = polled_rate([StatusPoll(0.0, 0, False), StatusPoll(1.0, 10, False), StatusPoll(5.0, 90, False)])
    assert (rate.per_second, rate.partial) == (20.0, True)


def test_percentile_is_nearest_rank_and_nan_when_empty():
    values = list(range(1, 101))
    assert (percentile(values, 0.5), percentile(values, 0.99), percentile(values, 1.0)) == (51, 100, 100)
    assert math.isnan(percentile([], 0.5))


def test_cores_from_cumulative_nanoseconds():
    samples = [(0.0, 0), (1.0, 500_000_000), (2.0, 2_500_000_000), (3.0, 3_000_000_000)]
    assert cores_used(samples) == pytest.approx(1.0)
    assert peak_cores(samples, 1.0) == pytest.approx(2.0)
    assert peak_cores(samples, 2.0) == pytest.approx(1.25)


def test_upsert_latency_is_when_the_count_first_covered_each_events_rank():
    counts = {"A": [(2, 10.0), (3, 12.0)], "B": [(1, 11.0)]}
    times = {"A": [1.0, 9.0, 11.5, 20.0], "B": [10.5, 10.8]}
    # A's 1st event is before `since`; its 4th and B's 2nd were never counted: left out.
    assert sorted(upsert_latencies(counts, times, since=5.0)) == pytest.approx([0.5, 0.5, 1.0])
    assert upsert_latencies(counts, times, since=5.0, until=10.0) == pytest.approx([1.0])


def test_memory_in_use_leaves_out_the_inactive_page_cache_as_docker_stats_does():
    assert memory_in_use(1000, {"total_inactive_file": 300, "total_rss": 600}) == 700     # cgroup v1
    assert memory_in_use(1000, {"inactive_file": 200, "anon": 700}) == 800                 # cgroup v2
    assert memory_in_use(1000, {}) == 1000


def test_thread_groups_name_what_a_worker_jvm_thread_does():
    assert thread_group("java", "stream executio") == "query threads (planning, offsets, commits)"
    assert thread_group("java", "Executor task l") == "tasks"
    assert thread_group("java", "C2 CompilerThre") == thread_group("java", "C1 CompilerThre") == "JIT compiler"
    assert thread_group("java", "G1 Conc#0") == thread_group("java", "GC Thread#1") == "garbage collector"
    assert thread_group("java", "VM Thread") == "JVM, other threads"
    assert thread_group("python", "event_engine") == "Python"
    assert thread_group("docker-init", "docker-init") == "other processes"


def test_cpu_by_group_sums_each_groups_threads_and_counts_new_threads_from_zero():
    before = {(1, 1): ("java", "Executor task l", 100), (1, 2): ("java", "Executor task i", 50),
              (2, 2): ("python", "python", 10)}
    after = {(1, 1): ("java", "Executor task l", 300), (1, 2): ("java", "Executor task i", 50),
             (1, 3): ("java", "C2 CompilerThre", 100), (2, 2): ("python", "python", 110)}
    # 100 ticks a second, over 2 s: 200 ticks of tasks are 1 core.
    assert cpu_by_group(before, after, 100, 2.0) == {"tasks": 1.0, "JIT compiler": 0.5, "Python": 0.5}


def test_thread_stat_reads_the_name_and_user_plus_system_ticks():
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
    line = "4242 (C2 (Compiler) ) S 1 1 1 0 -1 4194368 10 0 0 0 150 25 0 0 20 0 40 0"
    assert thread_stat(line) == ("C2 (Compiler) ", 175)
