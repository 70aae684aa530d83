"""Event time in the pipeline API, without Spark: watermarks, windows,
deduplication within a watermark; what is refused at load and how it reads;
late rows counted per node from Spark's progress events."""

from __future__ import annotations

import re

import pytest

from worker import api as sp
from worker.runtime.progress import ProgressTracker, stateful_operators
from worker.runtime.queries import output_mode

SCHEMA = "id long, sym string, price double, size long, time timestamp"
BARS = {"open": "min_by(price, time)", "close": "max_by(price, time)", "volume": "sum(size)", "trades": "count(1)"}


def trades(**watermark: str) -> sp.Stream:
    return sp.read.from_log("trades", schema=SCHEMA, name="trades", **watermark)


def watermarked() -> sp.Stream:
    return trades(watermark="time", lateness="10 seconds")


def test_a_final_window_appends_each_window_once_and_an_updating_one_upserts_what_changed():
    source = watermarked()
    bars = source | sp.window("time", "1 minute", BARS, by="sym", name="bars")
    volume = source | sp.window("time", "5 minutes", {"volume": "sum(size)", "trades": "count(1)"}, by="sym",
                                slide="1 minute", emit="updates", name="volume_5m")
    pipeline = sp.run(bars | sp.write.to_postgres("bars", name="bars_pg"),
                      volume | sp.write.to_postgres("volume_5m", key=["sym", "window_start"], version="trades",
                                                    name="volume_pg"))
    assert {q.name: output_mode(q) for q in pipeline.queries()} == {"bars_pg": "append", "volume_pg": "update"}
    assert not any(q.complete for q in pipeline.queries())
    assert pipeline.node("bars").is_stateful and pipeline.node("volume_5m").is_stateful
    assert pipeline.node("volume_5m").params == {
        "time": "time", "size": "5 minutes", "slide": "1 minute", "by": ["sym"],
        "aggregations": {"volume": "sum(size)", "trades": "count(1)"}, "emit": "updates"}
    assert pipeline.node("trades").params["watermark"] == "time"
    assert pipeline.node("trades").params["lateness"] == "10 seconds"


def test_a_watermark_node_serves_a_column_a_map_derives():
    stream = (trades() | sp.map(lambda df: df, name="stamp") | sp.watermark("time", "1 minute", name="late_1m")
              | sp.session_window("time", "30 seconds", {"trades": "count(1)"}, by="sym", name="sessions"))
    pipeline = sp.run(stream | sp.write.to_files("sessions", name="out"))
    assert output_mode(pipeline.queries()[0]) == "append"
    assert pipeline.node("sessions").params["gap"] == "30 seconds"
    assert pipeline.node("late_1m").kind == "watermark" and not pipeline.node("late_1m").is_stateful


@pytest.mark.parametrize("stream, needle", [
    (lambda: trades() | sp.window("time", "1 minute", BARS, name="bars"),
     "node 'bars': a final window is emitted when the watermark passes its end, and no watermark is declared "
     "before it: declare one on 'time'"),
    (lambda: trades(watermark="ingested", lateness="5 seconds") | sp.window("time", "1 minute", BARS, name="bars"),
     "node 'bars': a final window is emitted when the watermark passes its end, and the watermark is on "
     "'ingested', not 'time'"),
    (lambda: trades() | sp.deduplicate("id", within_watermark=True, name="dedup"),
     "node 'dedup': deduplicate(within_watermark=True) forgets keys once the watermark passes them, and no "
     "watermark is declared before it"),
    (lambda: watermarked() | sp.window("time", "1 minute", BARS, emit="updates", name="bars"),
     "node 'bars': emit='updates' writes only the keys each batch changed, but sink 'out' (files) appends what "
     "it is given, so a key would get a row per change: use emit='final' (each window once"),
])
def test_what_cannot_run_is_refused_at_load_naming_the_node(stream, needle):
    with pytest.raises(sp.PipelineError, match=re.escape(needle)):
        sp.run(stream() | sp.write.to_files("out", name="out"))


@pytest.mark.parametrize("make, needle", [
    (lambda: sp.window("time", "a minute", BARS), "sp.window(): size is a duration such as '10 seconds'"),
    (lambda: sp.window("time", "1 minute", BARS, slide="10"), "sp.window(): slide is a duration"),
    (lambda: sp.window("time", "1 minute", {}), "sp.window(): needs at least one aggregation"),
    (lambda: sp.window("time", "1 minute", BARS, emit="table"), "sp.window(): emit is 'final'"),
    (lambda: sp.window("", "1 minute", BARS), "sp.window(): time is the event-time column's name"),
    (lambda: sp.session_window("time", "1 minute", BARS, emit="updates"),
     "sp.session_window(emit='updates'): a session window is emitted only 'final'"),
    (lambda: sp.session_window("time", "soon", BARS), "sp.session_window(): gap is a duration"),
    (lambda: sp.watermark("time", "10"), "sp.watermark(): lateness is a duration"),
    (lambda: trades(watermark="time"), "from_log('trades'): a watermark needs both watermark= (the event-time "
                                       "column) and lateness="),
    (lambda: sp.read.from_kafka("trades", schema=SCHEMA, lateness="1 minute"), "from_kafka('trades'): a watermark "
                                                                               "needs both"),
])
def test_bad_arguments_are_refused_naming_the_call(make, needle):
    with pytest.raises(sp.PipelineError, match=re.escape(needle)):
        make()


def test_durations_are_spark_intervals_and_their_spacing_does_not_change_the_fingerprint():
    def pipeline(lateness: str) -> sp.Pipeline:
        return sp.Pipeline.of(trades(watermark="time", lateness=lateness) | sp.write.to_files("out", name="out"))
    assert pipeline("1 minute  30 seconds").fingerprint() == pipeline("1 minute 30 seconds").fingerprint()
    assert pipeline("90 seconds").fingerprint() != pipeline("1 minute 30 seconds").fingerprint()


def test_late_rows_are_counted_per_node_in_the_order_spark_lists_its_operators():
    # Spark lists a query's stateful operators from the sink up (operator 0 is the last).
    pipeline = sp.Pipeline.of(watermarked() | sp.deduplicate("id", within_watermark=True, name="dedup")
                              | sp.window("time", "1 minute", BARS, by="sym", name="bars")
                              | sp.write.to_files("bars", name="out"))
    operators = stateful_operators(pipeline)
    assert operators == {"out": ("bars", "dedup")}
    tracker = ProgressTracker(operators)

    def progress(batch_id: int, bars: int, dedup: int) -> dict:
        return {"name": "out", "batchId": batch_id, "numInputRows": 10, "sources": [],
                "stateOperators": [{"operatorName": "stateStoreSave", "numRowsDroppedByWatermark": bars},
                                   {"operatorName": "dedupeWithinWatermark", "numRowsDroppedByWatermark": dedup}]}
    tracker.on_progress(progress(0, 0, 3))
    tracker.on_progress(progress(1, 2, 1))
    tracker.on_progress(progress(1, 2, 1))      # the same batch again: counted once
    [query] = tracker.snapshot()
    assert query.late_rows == {"bars": 2, "dedup": 4}
