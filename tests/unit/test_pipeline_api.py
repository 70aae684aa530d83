"""The pipeline-authoring API (names, validation, fingerprint, describe) and
the pipeline file loader."""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

import pytest

from sparkpoint.messages import PipelineNode
from worker import api as sp
from worker.api.loader import load_pipeline
from worker.runtime.queries import output_mode

REPO = Path(__file__).resolve().parents[2]
SCHEMA = "id long, sym string, size long"


def passthrough(df):
    return df


def make_function(source: str, name: str = "enrich"):
    """Define a function from source, as a reloaded pipeline file would."""
    namespace: dict = {"__name__": "pipeline_under_test"}
    exec(textwrap.dedent(source), namespace)
    return namespace[name]


def two_branches(fn=passthrough, directory="out"):
    source = sp.read.from_log("trades", schema=SCHEMA)
    return sp.run(
        source | sp.map(fn) | sp.write.to_console(),
        source | sp.filter("size > 0") | sp.write.to_files(directory),
    )


def single(fn=passthrough, directory="out", name_map="m"):
    return sp.run(sp.read.from_log("trades", schema=SCHEMA, name="src")
                  | sp.map(fn, name=name_map)
                  | sp.write.to_files(directory, name="sink"))


# --- names ---------------------------------------------------------------------

def test_default_names_are_kind_and_position():
    names = [node.name for node in two_branches().nodes()]
    assert names == ["log_0", "map_1", "console_2", "filter_3", "files_4"]


def test_default_names_are_deterministic_across_builds():
    assert [n["name"] for n in two_branches().describe()] == [n["name"] for n in two_branches().describe()]
    assert two_branches().fingerprint() == two_branches().fingerprint()


def test_explicit_names_are_kept():
    pipeline = sp.run(sp.read.from_log("trades", schema=SCHEMA, name="trades")
                      | sp.aggregate("sym", {"volume": "sum(size)"}, name="volume_state")
                      | sp.write.to_console())
    assert [n.name for n in pipeline.nodes()] == ["trades", "volume_state", "console_2"]
    assert pipeline.node("volume_state").is_stateful


def test_duplicate_names_rejected():
    with pytest.raises(sp.PipelineError, match="two nodes are named 'x'"):
        sp.run(sp.read.from_log("t", schema=SCHEMA, name="x") | sp.map(passthrough, name="x")
               | sp.write.to_console())


def test_explicit_name_clashing_with_a_default_rejected():
    with pytest.raises(sp.PipelineError, match="map_1"):
        sp.run(sp.read.from_log("t", schema=SCHEMA) | sp.map(passthrough)
               | sp.write.to_console(name="map_1"))


@pytest.mark.parametrize("name", ["", "1st", "has space", "a/b", "é", "a" * 65])
def test_bad_names_rejected(name):
    with pytest.raises(sp.PipelineError, match="not allowed"):
        sp.run(sp.read.from_log("t", schema=SCHEMA, name=name) | sp.write.to_console())


def test_longest_allowed_name():
    pipeline = sp.run(sp.read.from_log("t", schema=SCHEMA, name="a" * 64) | sp.write.to_console())
    assert pipeline.nodes()[0].name == "a" * 64


# --- structure -----------------------------------------------------------------

def test_stream_must_end_in_sink():
    with pytest.raises(sp.PipelineError, match="does not end in a sink"):
        sp.run(sp.read.from_log("t", schema=SCHEMA, name="src") | sp.map(passthrough))


def test_nothing_after_sink():
    with pytest.raises(sp.PipelineError, match="nothing can follow the sink out"):
        sp.read.from_log("t", schema=SCHEMA) | sp.write.to_console(name="out") | sp.map(passthrough)


def test_run_needs_streams():
    with pytest.raises(sp.PipelineError):
        sp.run()
    with pytest.raises(sp.PipelineError, match="takes streams"):
        sp.run(sp.map(passthrough))


def test_pipe_into_non_operator_rejected():
    with pytest.raises(sp.PipelineError, match="expected an operator"):
        sp.read.from_log("t", schema=SCHEMA) | passthrough


def test_describe_lists_inputs_and_shared_source_once():
    described = {n["name"]: n for n in two_branches().describe()}
    assert list(described) == ["log_0", "map_1", "console_2", "filter_3", "files_4"]
    assert described["log_0"]["inputs"] == []
    assert described["map_1"]["inputs"] == ["log_0"]
    assert described["console_2"]["inputs"] == ["map_1"]
    assert described["filter_3"]["inputs"] == ["log_0"]
    assert described["files_4"]["inputs"] == ["filter_3"]
    assert described["filter_3"]["params"] == {"condition": "size > 0"}
    assert described["map_1"]["function"].startswith(f"{__name__}.passthrough#")
    assert described["filter_3"]["function"] is None


def test_the_graph_names_each_node_its_kind_state_and_inputs():
    source = sp.read.from_log("trades", schema=SCHEMA, name="src")
    pipeline = sp.run(source | sp.write.to_files("a", name="a_out"),
                      source | sp.aggregate("sym", {"n": "count(1)"}, name="counts") | sp.write.to_files("b"))
    assert pipeline.graph() == (
        PipelineNode("src", "source.log"), PipelineNode("a_out", "sink.files", inputs=("src",)),
        PipelineNode("counts", "aggregate", True, ("src",)), PipelineNode("files_3", "sink.files", inputs=("counts",)))


def test_describe_shared_prefix_lists_each_input_once():
    enriched = sp.read.from_log("trades", schema=SCHEMA, name="src") | sp.map(passthrough, name="enrich")
    pipeline = sp.run(enriched | sp.write.to_console(name="a"), enriched | sp.write.to_files("b", name="b"))
    inputs = {n["name"]: n["inputs"] for n in pipeline.describe()}
    assert inputs == {"src": [], "enrich": ["src"], "a": ["enrich"], "b": ["enrich"]}


# --- fingerprint ---------------------------------------------------------------

def test_fingerprint_changes_with_a_param():
    assert single(directory="a").fingerprint() != single(directory="b").fingerprint()


def test_fingerprint_changes_with_a_name():
    assert single(name_map="m").fingerprint() != single(name_map="n").fingerprint()


def test_fingerprint_changes_when_a_constant_in_the_function_changes():
    a = make_function('def enrich(df):\n    return df.select("price")\n')
    b = make_function('def enrich(df):\n    return df.select("size")\n')
    assert single(a).fingerprint() != single(b).fingerprint()


def test_fingerprint_changes_when_the_method_called_changes():
    # Same bytecode and constants, different attribute name (co_names).
    a = make_function('def enrich(df):\n    return df.select("price")\n')
    b = make_function('def enrich(df):\n    return df.where("price")\n')
    assert single(a).fingerprint() != single(b).fingerprint()


def test_fingerprint_same_when_reloading_a_file_whose_function_has_a_comprehension(tmp_path):
    # A worker restart loads the same file again: the fingerprint must not change,
    # also when a function holds a nested code object (comprehension, lambda).
    path = tmp_path / "p.py"
    path.write_text(textwrap.dedent("""\
        from worker import api as sp

        def enrich(df):
            return df.select(*[c for c in df.columns])

        sp.run(sp.read.from_log("t", schema="a int") | sp.map(enrich, name="m") | sp.write.to_console())
    """))
    first, second = load_pipeline(path), load_pipeline(path)
    assert first.describe()[1]["function"] == second.describe()[1]["function"]
    assert first.fingerprint() == second.fingerprint()


# --- loader --------------------------------------------------------------------

def write(tmp_path: Path, body: str, name: str = "p.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def test_load_missing_file_names_the_path(tmp_path):
    path = tmp_path / "missing.py"
    with pytest.raises(sp.PipelineError) as caught:
        load_pipeline(path)
    assert str(path) in str(caught.value)


def test_load_file_without_run(tmp_path):
    path = write(tmp_path, """\
        from worker import api as sp
        source = sp.read.from_log("t", schema="a int")
    """)
    with pytest.raises(sp.PipelineError) as caught:
        load_pipeline(path)
    assert str(caught.value).startswith(str(path))
    assert "does not define a pipeline" in str(caught.value)


def test_load_file_raising_reports_path_line_and_exception(tmp_path):
    path = write(tmp_path, """\
        from worker import api as sp

        ratio = 1
        ratio = ratio / 0
    """)
    with pytest.raises(sp.PipelineError) as caught:
        load_pipeline(path)
    message = str(caught.value)
    assert message == f"{path} (line 4): ZeroDivisionError: division by zero"
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_load_file_raising_in_a_helper_reports_the_innermost_line(tmp_path):
    path = write(tmp_path, """\
        def helper():
            raise KeyError("sym")

        helper()
    """)
    with pytest.raises(sp.PipelineError) as caught:
        load_pipeline(path)
    assert str(caught.value) == f"{path} (line 2): KeyError: 'sym'"


def test_load_pipeline_error_is_prefixed_with_the_path(tmp_path):
    path = write(tmp_path, """\
        from worker import api as sp
        sp.run(sp.read.from_log("t", schema="a int") | sp.map(lambda df: df))
    """)
    with pytest.raises(sp.PipelineError) as caught:
        load_pipeline(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert "does not end in a sink" in str(caught.value)


def test_load_two_runs_rejected(tmp_path):
    path = write(tmp_path, """\
        from worker import api as sp
        sp.run(sp.read.from_log("a", schema="x int") | sp.write.to_console())
        sp.run(sp.read.from_log("b", schema="x int") | sp.write.to_console())
    """)
    with pytest.raises(sp.PipelineError, match="2 times"):
        load_pipeline(path)


def test_run_outside_the_loader_records_nothing(tmp_path):
    path = write(tmp_path, """\
        from worker import api as sp
        sp.run(sp.read.from_log("a", schema="x int") | sp.write.to_console(name="out"))
    """)
    single()  # a pipeline declared outside load_pipeline must not leak into the next load
    assert [n.name for n in load_pipeline(path).nodes()] == ["log_0", "out"]


def test_load_the_example_pipeline():
    pipeline = load_pipeline(REPO / "pipelines" / "trades.py")
    assert [n.name for n in pipeline.nodes()] == [
        "trades", "enrich", "enriched_out", "vwap_state", "vwap", "vwap_out"]
    assert len(pipeline.branches) == 2
    inputs = {n["name"]: n["inputs"] for n in pipeline.describe()}
    assert inputs["vwap_state"] == ["trades"] and inputs["enrich"] == ["trades"]
    assert load_pipeline(REPO / "pipelines" / "trades.py").fingerprint() == pipeline.fingerprint()


def test_a_pipeline_shares_functions_through_a_module_beside_it(tmp_path):
    (tmp_path / "shared_for_test.py").write_text("def passthrough(df):\n    return df\n")
    path = write(tmp_path, """\
        from shared_for_test import passthrough
        from worker import api as sp
        sp.run(sp.read.from_log("a", schema="x int") | sp.map(passthrough, name="m") | sp.write.to_console())
    """)
    pipeline = load_pipeline(path)
    assert pipeline.node("m").fn.__module__ == "shared_for_test"
    assert str(tmp_path) not in sys.path           # only while the file runs


def test_the_postgres_example_shares_the_trades_functions():
    pipeline = load_pipeline(REPO / "pipelines" / "trades_postgres.py")
    files = load_pipeline(REPO / "pipelines" / "trades.py")
    assert pipeline.node("enrich").fn is files.node("enrich").fn
    assert [b.sink.name for b in pipeline.branches] == ["enriched_pg", "enriched_out", "vwap_pg"]
    assert pipeline.node("vwap_pg").params == {"table": "vwap", "key": ["sym"], "version": "trades"}
    assert pipeline.node("enriched_pg").params == {"table": "trades_enriched"}


# --- sinks -----------------------------------------------------------------------

@pytest.mark.parametrize("call, needle", [
    (lambda: sp.write.to_postgres("Trades"), "lower-case"),
    (lambda: sp.write.to_postgres("a.b.c"), "lower-case"),
    (lambda: sp.write.to_postgres("t", key="sym"), "both key= and version="),
    (lambda: sp.write.to_postgres("t", version="n"), "both key= and version="),
    (lambda: sp.write.to_postgres("t", key=["sym", "n"], version="n"), "cannot be part of the key"),
])
def test_to_postgres_is_validated(call, needle):
    with pytest.raises(sp.PipelineError, match=needle):
        call()


def test_to_postgres_accepts_a_schema_and_a_composite_key():
    node = sp.write.to_postgres("analytics.vwap", key=["sym", "venue"], version="trades").node
    assert node.params == {"table": "analytics.vwap", "key": ["sym", "venue"], "version": "trades"}


@pytest.mark.parametrize("call, needle", [
    (lambda: sp.write.to_kafka(""), "a Kafka topic name"),
    (lambda: sp.write.to_kafka("trades out"), "a Kafka topic name"),
    (lambda: sp.write.to_kafka("t", key=""), "key is a column name"),
    (lambda: sp.write.to_kafka("t", key=["sym"]), "key is a column name"),
])
def test_to_kafka_is_validated(call, needle):
    with pytest.raises(sp.PipelineError, match=needle):
        call()


def test_to_kafka_takes_a_key_and_may_create_its_topic():
    assert sp.write.to_kafka("out").node.params == {"topic": "out"}
    node = sp.write.to_kafka("trades.enriched", key="sym", create=True, name="k").node
    assert (node.kind, node.name, node.params) == ("sink.kafka", "k", {"topic": "trades.enriched", "key": "sym",
                                                                       "create": True})


def bounded_pipeline():
    trades = sp.read.from_log("trades", schema="id long, sym string", name="trades", bounded=True)
    quotes = sp.read.from_log("quotes", schema="id long, sym string", name="quotes")
    return sp.Pipeline.of(
        trades | sp.deduplicate("id", name="dedupe") | sp.write.to_files("a", name="a_out"),
        trades | sp.aggregate("sym", {"n": "count(1)"}, name="counts") | sp.write.to_files("b", name="b_out"),
        quotes | sp.write.to_files("c", name="c_out"),
    )


def test_a_node_is_finished_once_every_branch_through_it_has_finished():
    pipeline = bounded_pipeline()
    assert [b.bounded for b in pipeline.branches] == [True, True, False]
    assert pipeline.finished_nodes(set()) == ()
    # The shared source still feeds b_out: only a_out's own nodes are finished.
    assert pipeline.finished_nodes({"a_out"}) == ("dedupe", "a_out")
    assert pipeline.finished_nodes({"a_out", "b_out"}) == ("trades", "dedupe", "a_out", "counts", "b_out")


def test_deduplicate_is_stateful_but_does_not_make_its_branch_aggregate():
    pipeline = bounded_pipeline()
    assert pipeline.node("dedupe").is_stateful and pipeline.node("counts").is_stateful
    assert [b.complete for b in pipeline.branches] == [False, True, False]
    with pytest.raises(sp.PipelineError, match="key columns"):
        sp.deduplicate([])


# --- which branches share a Spark query ---------------------------------------------------

def test_transactional_stateless_branches_with_one_stem_share_a_query_named_after_the_node_before_their_sinks():
    pipeline = load_pipeline(REPO / "pipelines" / "trades_postgres.py")
    queries = {query.name: [sink.name for sink in query.sinks] for query in pipeline.queries()}
    assert queries == {"enrich": ["enriched_pg", "enriched_out"], "vwap_pg": ["vwap_pg"]}
    shared = pipeline.queries()[0]
    assert [node.name for node in shared.stem] == ["trades", "enrich"]
    assert [node.name for node in shared.nodes] == ["trades", "enrich", "enriched_pg", "enriched_out"]


def test_a_branch_alone_on_its_stem_is_its_own_query_named_after_its_sink():
    pipeline = load_pipeline(REPO / "pipelines" / "trades.py")
    assert [(q.name, [s.name for s in q.sinks]) for q in pipeline.queries()] == \
        [(b.sink.name, [b.sink.name]) for b in pipeline.branches]


@pytest.mark.parametrize("other", [
    pytest.param(lambda s: s | sp.write.to_console(name="other"), id="published as batches come (console)"),
    pytest.param(lambda s: s | sp.write.to_postgres("t", key="sym", version="id", name="other"), id="upsert"),
    pytest.param(lambda s: s | sp.deduplicate(["id"], name="dedupe") | sp.write.to_files("d", name="other"),
                 id="another stem (stateful)"),
    pytest.param(lambda s: s | sp.filter("size > 0", name="big") | sp.write.to_files("d", name="other"),
                 id="another stem"),
])
def test_branches_that_differ_in_more_than_a_transactional_sink_keep_their_own_queries(other):
    source = sp.read.from_log("trades", schema=SCHEMA, name="src")
    pipeline = sp.run(source | sp.write.to_files("out", name="files"), other(source))
    assert [q.name for q in pipeline.queries()] == ["files", "other"]


def test_stateful_or_bounded_branches_never_share_a_query():
    source = sp.read.from_log("trades", schema=SCHEMA, name="src")
    deduped = source | sp.deduplicate(["id"], name="dedupe")
    bounded = sp.read.from_log("trades", schema=SCHEMA, name="bounded_src", bounded=True)
    pipeline = sp.run(deduped | sp.write.to_files("a", name="a"), deduped | sp.write.to_files("b", name="b"),
                      bounded | sp.write.to_files("c", name="c"), bounded | sp.write.to_files("d", name="d"))
    assert [q.name for q in pipeline.queries()] == ["a", "b", "c", "d"]


def test_an_operator_piped_from_two_streams_cannot_name_two_queries():
    shared = sp.map(passthrough, name="m")
    first = sp.read.from_log("trades", schema=SCHEMA, name="first") | shared
    second = sp.read.from_log("trades", schema=SCHEMA, name="second") | shared
    pipeline = sp.run(first | sp.write.to_files("a", name="a"), first | sp.write.to_files("b", name="b"),
                      second | sp.write.to_files("c", name="c"), second | sp.write.to_files("d", name="d"))
    with pytest.raises(sp.PipelineError, match="node 'm' is piped from two different streams"):
        pipeline.queries()


# --- the Kafka source ------------------------------------------------------------

def test_from_kafka_records_its_topics_start_and_options_in_the_graph():
    pipeline = sp.run(sp.read.from_kafka(["a", "b.c"], schema=SCHEMA, name="src", starting_offsets={"a": {1: 5}},
                                         max_records_per_batch=10, fail_on_data_loss=False,
                                         metadata=["offset", "key"])
                      | sp.write.to_files("out", name="sink"))
    source = pipeline.node("src")
    assert source.kind == "source.kafka" and source.is_source and not source.is_stateful
    assert source.params == {"topics": ["a", "b.c"], "schema": SCHEMA, "starting_offsets": '{"a": {"1": 5}}',
                             "max_records_per_batch": 10, "fail_on_data_loss": False, "metadata": ["key", "offset"]}


def test_from_kafka_defaults_read_from_the_earliest_and_fail_on_data_loss():
    source = sp.run(sp.read.from_kafka("t", schema=SCHEMA, name="src") | sp.write.to_console()).node("src")
    assert source.params == {"topics": ["t"], "schema": SCHEMA, "starting_offsets": "earliest"}


@pytest.mark.parametrize("kwargs, needle", [
    ({"topics": "bad topic"}, "a topic name is 1 to 249 letters"),
    ({"topics": []}, "a topic name is 1 to 249 letters"),
    ({"topics": "t", "max_records_per_batch": 0}, "from_kafka('t'): max_records_per_batch must be positive"),
    ({"topics": "t", "starting_offsets": "newest"}, "starting_offsets is 'earliest', 'latest' or"),
    ({"topics": "t", "starting_offsets": {"t": {0: -1}}}, "with offsets of 0 or more"),
    ({"topics": "t", "starting_offsets": {"t": [1]}}, "starting_offsets is 'earliest'"),
    ({"topics": "t", "metadata": ["headers"]}, "metadata ['headers'] unknown"),
])
def test_from_kafka_bad_arguments_name_the_source(kwargs, needle):
    topics = kwargs.pop("topics")
    with pytest.raises(sp.PipelineError, match=re.escape(needle)):
        sp.read.from_kafka(topics, schema=SCHEMA, **kwargs)


def test_an_aggregate_emits_updates_into_an_upsert_and_its_whole_table_elsewhere_by_default():
    source = sp.read.from_log("trades", schema=SCHEMA)
    volume = source | sp.aggregate("sym", {"volume": "sum(size)", "trades": "count(1)"}, name="volume")
    pipeline = sp.run(volume | sp.write.to_postgres("volume", key="sym", version="trades", name="upserted"),
                      volume | sp.write.to_files("volume", name="files"),
                      volume | sp.write.to_kafka("volume", key="sym", name="changelog"))
    modes = {q.name: output_mode(q) for q in pipeline.queries()}
    assert modes == {"upserted": "update", "files": "complete", "changelog": "complete"}
    assert [q.complete for q in pipeline.queries()] == [False, True, True]      # the book: every batch, or the newest
    assert output_mode(two_branches().queries()[0]) == "append"


@pytest.mark.parametrize("sink, emit, mode", [
    (lambda: sp.write.to_kafka("volume", key="sym"), "updates", "update"),     # a changelog
    (lambda: sp.write.to_console(), "updates", "update"),
    (lambda: sp.write.to_postgres("volume", key="sym", version="trades"), "table", "complete"),
])
def test_emit_chooses_updates_or_the_table_where_the_sink_takes_either(sink, emit, mode):
    source = sp.read.from_log("trades", schema=SCHEMA)
    [query] = sp.run(source | sp.aggregate("sym", {"trades": "count(1)"}, emit=emit, name="agg")
                     | sink()).queries()
    assert output_mode(query) == mode


@pytest.mark.parametrize("sink, what", [
    (lambda: sp.write.to_files("volume", name="out"), "files"),
    (lambda: sp.write.to_postgres("volume", name="out"), "a transactional PostgreSQL table"),
])
def test_updates_into_a_sink_that_appends_are_refused_naming_the_node_and_the_sink(sink, what):
    source = sp.read.from_log("trades", schema=SCHEMA)
    with pytest.raises(sp.PipelineError, match=re.escape(f"node 'agg': emit='updates' writes only the keys each "
                                                         f"batch changed, but sink 'out' ({what}) appends")):
        sp.run(source | sp.aggregate("sym", {"n": "count(1)"}, emit="updates", name="agg") | sink())
    with pytest.raises(sp.PipelineError, match=r"sp.aggregate\(emit='changes'\): emit is 'updates'"):
        sp.aggregate("sym", {"n": "count(1)"}, emit="changes")


# --- joins with a reference table -------------------------------------------------------

@pytest.mark.parametrize("make, needle", [
    (lambda: sp.read.table_from_postgres("Symbols", schema="sym string"), "table_from_postgres('Symbols'): a table"),
    (lambda: sp.read.table_from_postgres("symbols", schema=""), "table_from_postgres('symbols'): schema is"),
    (lambda: sp.join(sp.read.from_log("s", schema=SCHEMA), on="sym"), "sp.join() joins a reference table"),
    (lambda: sp.join(sp.read.table_from_postgres("symbols", schema="sym string"), on=[]),
     "sp.join('symbols'): on is the column(s) to join on"),
    (lambda: sp.join(sp.read.table_from_postgres("symbols", schema="sym string"), on="sym", how="right"),
     "sp.join('symbols'): how is 'left'"),
])
def test_join_arguments_are_checked_naming_the_table(make, needle):
    with pytest.raises(sp.PipelineError, match=re.escape(needle)):
        make()


def test_a_join_is_a_stateless_node_whose_table_is_part_of_the_fingerprint():
    def pipeline(table: str) -> sp.Pipeline:
        symbols = sp.read.table_from_postgres(table, schema="sym string, sector string")
        return sp.Pipeline.of(sp.read.from_log("trades", schema=SCHEMA, name="trades")
                              | sp.join(symbols, on="sym", name="sectors") | sp.write.to_files("out", name="out"))
    joined = pipeline("ref.symbols")
    assert joined.node("sectors").params == {"table": "ref.symbols", "schema": "sym string, sector string",
                                             "on": ["sym"], "how": "left"}
    assert not joined.node("sectors").is_stateful and output_mode(joined.queries()[0]) == "append"
    assert joined.fingerprint() != pipeline("symbols").fingerprint()
