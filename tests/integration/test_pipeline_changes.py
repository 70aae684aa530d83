"""Restarting from a checkpoint with a changed pipeline file, with real Spark:
state follows node names (docs/state-mapping.md), checked by the values the sinks
publish, not only by the worker starting; and finished nodes (a bounded
source read to its end) refuse a changed graph unless forced."""

from __future__ import annotations

import textwrap
from collections import Counter
from pathlib import Path

import pytest

from sparkpoint.eventlog import EventLog
from sparkpoint.producer import append_trades, write_trades
from tests.support import all_published, caught_up, expected_vwap, get_json, wait_until, worker_status
from worker.checkpointing.store import CheckpointStore
from worker.publishing.targets.files import read_published

pytestmark = pytest.mark.integration

SETTINGS = {"SP_CHECKPOINT_FREQ": "500", "SP_MAX_RECORDS_PER_BATCH": "500", "SP_TRIGGER_INTERVAL": "200",
            "SP_REPORT_INTERVAL": "300", "SP_SHUFFLE_PARTITIONS": "2"}
HEADER = '''
    from worker import api as sp

    trades = sp.read.from_log("trades", schema="id long, sym string, price double, size long, time timestamp",
                              name="trades"{bounded})
'''
VOLUME = 'sp.aggregate("sym", {"trades": "count(1)", "volume": "sum(size)"}, name="volume_state")'


def pipeline_file(directory: Path, name: str, body: str, *, bounded: bool = False) -> Path:
    path = directory / f"{name}.py"
    path.write_text(textwrap.dedent(HEADER.format(bounded=", bounded=True" if bounded else "")) +
                    textwrap.dedent(body))
    return path


def table(stack, directory: str) -> dict[str, dict]:
    rows = read_published(stack.config.output_dir / directory, latest_batch_only=True)
    return {row["sym"]: row for row in (rows.to_pylist() if rows is not None else [])}


def drained(stack, log: EventLog, queries: set[str], state: str = "running") -> dict:
    """Wait until the worker read the whole log in every query and published it all."""
    return wait_until(lambda: (w := caught_up(stack, log, queries, state=state)) and
                      all_published(get_json(stack.config.status_url, stack.config.api_token)) and w,
                      timeout_s=300, what=f"the worker to process and publish the whole log ({state})")


def test_state_follows_node_names_across_an_inserted_a_renamed_and_a_removed_node(make_stack, tmp_path):
    before = pipeline_file(tmp_path, "before", f'''
        sp.run(
            trades | {VOLUME} | sp.write.to_files("volume", name="volume_out"),
            trades | sp.aggregate("sym", {{"n": "count(1)"}}, name="counts") | sp.write.to_files("counts", name="counts_out"),
            trades | sp.aggregate("sym", {{"top": "max(size)"}}, name="maxes") | sp.write.to_files("maxes", name="maxes_out"),
        )
    ''')
    # A stateful node inserted before volume_state in its query (Spark's
    # operator ids count from the sink, so it becomes operator 1 next to the
    # kept operator 0), counts renamed (how to ask for fresh state), maxes removed.
    after = pipeline_file(tmp_path, "after", f'''
        sp.run(
            trades | sp.deduplicate("id", name="dedupe") | {VOLUME} | sp.write.to_files("volume", name="volume_out"),
            trades | sp.aggregate("sym", {{"n": "count(1)"}}, name="counts_v2") | sp.write.to_files("counts", name="counts_out"),
        )
    ''')
    stack = make_stack(workers=1, pipeline=before, **SETTINGS)
    log = EventLog.create(stack.config.log_dir / "trades", 2)
    first = write_trades(log, 1500, seed=21)
    stack.start_controller()
    stack.start_worker(0)
    drained(stack, log, {"volume_out", "counts_out", "maxes_out"})
    assert stack.stop("worker-0") == 0

    # New input, part of it delivered twice: the new dedupe node drops the repeats.
    second = write_trades(log, 900, seed=22)
    append_trades(log, second[:300])
    stack.start_worker(0, SP_PIPELINE=str(after))
    drained(stack, log, {"volume_out", "counts_out"})

    # volume_state kept its state: the whole input, each event once.
    expected = expected_vwap(first + second)
    assert {sym: (row["trades"], row["volume"]) for sym, row in table(stack, "volume").items()} == \
           {sym: (want["trades"], want["volume"]) for sym, want in expected.items()}
    # counts_v2 started fresh (renamed): only what came after the restart,
    # repeats included (no dedupe on that branch).
    assert {sym: row["n"] for sym, row in table(stack, "counts").items()} == \
           Counter(event["sym"] for event in second + second[:300])
    worker_log = stack.services["worker-0"].log_path.read_text()
    for node, action in (("dedupe", "fresh"), ("volume_state", "keep"), ("counts_v2", "fresh"),
                         ("counts", "drop"), ("maxes", "drop")):
        assert any(line.split()[:2] == [node, action] for line in worker_log.splitlines()), f"{node} {action}"


def test_finished_nodes_refuse_a_changed_graph_unless_forced(make_stack, tmp_path):
    branch = f'trades | {VOLUME} | sp.write.to_files("volume", name="volume_out")'
    before = pipeline_file(tmp_path, "bounded", f"sp.run({branch})", bounded=True)
    after = pipeline_file(tmp_path, "bounded_changed", f'''
        sp.run(
            {branch},
            trades | sp.write.to_files("copy", name="copy_out"),
        )
    ''', bounded=True)
    stack = make_stack(workers=1, pipeline=before, **SETTINGS)
    log = EventLog.create(stack.config.log_dir / "trades", 2)
    events = write_trades(log, 1200, seed=31)
    stack.start_controller()
    stack.start_worker(0)
    drained(stack, log, {"volume_out"}, state="finished")
    store = CheckpointStore(stack.config.checkpoint_dir(0))
    finished = wait_until(lambda: (ids := store.checkpoint_ids()) and store.load(ids[-1]).finished_nodes and ids[-1],
                          timeout_s=60, what="a checkpoint recording the finished nodes")
    wait_until(lambda: worker_status(stack)["last_checkpoint"]["checkpoint_id"] >= finished, timeout_s=60,
               what=f"checkpoint {finished} to complete")
    assert stack.stop("worker-0") == 0

    # The changed pipeline is refused, naming the finished nodes and the override.
    earlier_runs = stack.services["worker-0"].log_path.stat().st_size
    refused = stack.start_worker(0, SP_PIPELINE=str(after))
    wait_until(lambda: refused.process.poll() is not None, timeout_s=240, what="the refused worker to exit")
    assert refused.process.returncode == 2
    worker_log = refused.log_path.read_bytes()[earlier_runs:].decode()
    assert "finished nodes (trades, volume_out, volume_state)" in worker_log
    assert "SP_FORCE_GRAPH_CHANGE=true" in worker_log and "Traceback" not in worker_log

    # Forced: it restores; the finished branch resumes from its state (nothing
    # new to read) and the new branch reads the log from the beginning.
    stack.start_worker(0, SP_PIPELINE=str(after), SP_FORCE_GRAPH_CHANGE="true")
    drained(stack, log, {"volume_out", "copy_out"}, state="finished")
    expected = expected_vwap(events)
    assert {sym: row["trades"] for sym, row in table(stack, "volume").items()} == \
           {sym: want["trades"] for sym, want in expected.items()}
    copied = read_published(stack.config.output_dir / "copy").column("id").to_pylist()
    assert sorted(copied) == sorted(e["id"] for e in events)


WINDOWED = '''
    from worker import api as sp

    trades = sp.read.from_log("trades", schema="id long, sym string, price double, size long, time timestamp",
                              name="trades", watermark="time", lateness="5 seconds")
    counts = {"trades": "count(1)", "volume": "sum(size)"}
'''


def timed_trades(ids: range, seconds_per_trade: float = 0.1) -> list[dict]:
    """Trades of two symbols, in order, ``seconds_per_trade`` apart from
    2026-01-01 in event time."""
    return [{"id": i, "sym": ("AAPL", "IBM")[i % 2], "price": 1.0, "size": 1 + i % 7,
             "time": f"2026-01-01T00:{int(i * seconds_per_trade) // 60:02d}:{i * seconds_per_trade % 60:06.3f}Z"}
            for i in ids]


def windows_published(stack, directory: str) -> dict[tuple, tuple[int, int]]:
    published = read_published(stack.config.output_dir / directory)
    rows = published.to_pylist() if published is not None else []
    keys = [(row["sym"], row["window_start"].minute) for row in rows]
    assert len(keys) == len(set(keys)), f"a final window published twice to {directory}"
    return {key: (row["trades"], row["volume"]) for key, row in zip(keys, rows)}


def minute_counts(trades: list[dict]) -> dict[tuple, tuple[int, int]]:
    out: dict[tuple, list[int]] = {}
    for trade in trades:
        row = out.setdefault((trade["sym"], int(trade["time"][14:16])), [0, 0])
        row[0] += 1
        row[1] += trade["size"]
    return {key: tuple(value) for key, value in out.items()}


def test_a_window_kept_by_name_keeps_its_open_windows_and_a_renamed_one_starts_fresh(make_stack, tmp_path):
    before, after = windowed(tmp_path, "bars", "minutes"), windowed(tmp_path, "bars", "minutes_v2")
    stack = make_stack(workers=1, pipeline=before, **SETTINGS)
    log = EventLog.create(stack.config.log_dir / "trades", 1)
    first, second = timed_trades(range(0, 900)), timed_trades(range(900, 1800))     # 0-90 s, 90-180 s
    log.append(0, first)
    stack.start_controller()
    stack.start_worker(0)
    drained(stack, log, {"bars_out", "minutes_out"})
    # Minute 0 is final (the watermark passed 60 s; emitted by the batch the moved watermark adds, then
    # published); minute 1 (60-120 s) is open, in both nodes' state.
    wait_until(lambda: windows_published(stack, "bars") == minute_counts(first[:600]), timeout_s=120,
               what="minute 0 published")
    assert stack.stop("worker-0") == 0

    log.append(0, second + [dict(second[-1], id=10**6, sym="CLOSE", time="2026-01-01T01:00:00.000Z")])
    stack.start_worker(0, SP_PIPELINE=str(after))
    drained(stack, log, {"bars_out", "minutes_out"})
    wait_until(lambda: len(windows_published(stack, "bars")) == 6, timeout_s=120, what="minutes 1 and 2 emitted")
    # bars kept its state: minute 1 has the trades from before the restart too.
    assert windows_published(stack, "bars") == minute_counts(first + second)
    # minutes_v2 started fresh (renamed): minute 1 holds only the trades after the restart.
    wait_until(lambda: len(windows_published(stack, "minutes")) == 6, timeout_s=120, what="minutes_v2 emitting")
    assert windows_published(stack, "minutes") == {**minute_counts(first[:600]), **minute_counts(second)}
    worker_log = stack.services["worker-0"].log_path.read_text()
    for node, action in (("bars", "keep"), ("minutes_v2", "fresh"), ("minutes", "drop")):
        assert any(line.split()[:2] == [node, action] for line in worker_log.splitlines()), f"{node} {action}"


def windowed(directory: Path, bars: str, minutes: str) -> Path:
    """Two branches of one-minute windows to files, their window nodes named ``bars`` and ``minutes``."""
    path = directory / f"{bars}_{minutes}.py"
    path.write_text(textwrap.dedent(WINDOWED) + textwrap.dedent(f'''
        sp.run(
            trades | sp.window("time", "1 minute", counts, by="sym", name="{bars}")
            | sp.write.to_files("bars", name="bars_out"),
            trades | sp.window("time", "1 minute", counts, by="sym", name="{minutes}")
            | sp.write.to_files("minutes", name="minutes_out"),
        )
    '''))
    return path
