"""Restoring a checkpoint into a changed pipeline: the plan node by node, and
where each checkpoint file goes (pure: layouts and paths, no Spark)."""

from __future__ import annotations

import pytest

from worker.checkpointing.layout import Column, QueryLayout, StatefulNode, StateSchema
from worker.checkpointing.manifest import FileEntry, Manifest, QueryCut
from worker.stateplan.layout import PipelineLayout
from worker.stateplan.plan import Action, StateRef, plan_manifest, plan_restore, schema_changes
from worker.stateplan.remap import EmptyState, PlanRefused, remap_files

TRADES = 'source.log:{"log":"trades"}'
SYM = (Column("sym", "string"),)
VWAP = StateSchema(SYM, (Column("volume", "bigint", "sum(size)"), Column("trades", "bigint", "count(1)")))
SEEN = StateSchema((Column("id", "bigint"),), ())


def query(*stateful: tuple[str, StateSchema], source: str = "trades", identity: str = TRADES) -> QueryLayout:
    return QueryLayout(source, identity, tuple(StatefulNode(name, schema) for name, schema in stateful))


def layout(queries: dict[str, QueryLayout], nodes: tuple[str, ...], *, fingerprint: str = "f-old",
           batches: dict[str, int] | None = None, finished: frozenset[str] = frozenset()) -> PipelineLayout:
    return PipelineLayout(fingerprint, nodes, queries, batches if batches is not None else dict.fromkeys(queries, 7),
                          finished)


def new(queries: dict[str, QueryLayout], nodes: tuple[str, ...], fingerprint: str = "f-new") -> PipelineLayout:
    return PipelineLayout(fingerprint, nodes, queries)


def decisions(plan, node: str) -> list:
    return [d for d in plan.nodes if d.node == node]


def only(plan, node: str):
    [decision] = decisions(plan, node)
    return decision


def entry(tag: str) -> FileEntry:
    return FileEntry(tag * 4, len(tag))


def query_files(query: str, operators: int) -> dict[str, FileEntry]:
    """What a checkpoint of ``query`` at batch 7 holds, with ``operators`` stateful operators."""
    files = {path: entry(f"{query}:{path}") for path in
             ("metadata", "offsets/6", "offsets/7", "commits/6", "commits/7", "sources/0/0")}
    for op in range(operators):
        for path in (f"state/{op}/_metadata/metadata", f"state/{op}/0/_metadata/schema",
                     f"state/{op}/0/8.delta", f"state/{op}/1/8.delta", f"state/{op}/1/5.snapshot"):
            files[path] = entry(f"{query}:{path}")
    return files


OLD = layout({"vwap_out": query(("vwap_state", VWAP)), "enriched_out": query()},
             ("trades", "enrich", "enriched_out", "vwap_state", "vwap", "vwap_out"))


def test_an_unchanged_pipeline_keeps_everything_where_it_was():
    plan = plan_restore(OLD, new(OLD.queries, OLD.node_names, fingerprint="f-old"))
    assert not plan.refused
    assert {d.node: d.action for d in plan.nodes} == dict.fromkeys(OLD.node_names, Action.KEEP)
    assert only(plan, "vwap_state").old == only(plan, "vwap_state").new == StateRef("vwap_out", 0)
    assert [(q.name, q.origin, q.batch_id, q.keep_operator_metadata) for q in plan.queries] == [
        ("vwap_out", "vwap_out", 7, True), ("enriched_out", "enriched_out", 7, True)]
    files = {"vwap_out": query_files("vwap_out", 1), "enriched_out": query_files("enriched_out", 0)}
    restored = remap_files(plan, files)
    assert restored.files == files
    assert restored.empty_state == restored.fresh_metadata == ()


def test_a_stateful_node_inserted_upstream_starts_empty_and_the_existing_one_keeps_its_id():
    # Spark numbers operators from the sink up: the new upstream node gets id 1.
    plan = plan_restore(OLD, new({"vwap_out": query(("dedupe", SEEN), ("vwap_state", VWAP)), "enriched_out": query()},
                                 ("trades", "enrich", "enriched_out", "dedupe", "vwap_state", "vwap", "vwap_out")))
    assert not plan.refused
    assert only(plan, "dedupe").action is Action.FRESH
    assert only(plan, "dedupe").new == StateRef("vwap_out", 1)
    assert (only(plan, "vwap_state").action, only(plan, "vwap_state").new) == (Action.KEEP, StateRef("vwap_out", 0))
    vwap_out = plan.queries[0]
    assert (vwap_out.origin, vwap_out.keep_operator_metadata) == ("vwap_out", False)
    restored = remap_files(plan, {"vwap_out": query_files("vwap_out", 1), "enriched_out": query_files("enriched_out", 0)})
    assert sorted(restored.files["vwap_out"]) == [
        "commits/6", "commits/7", "metadata", "offsets/6", "offsets/7", "sources/0/0",
        "state/0/0/8.delta", "state/0/0/_metadata/schema", "state/0/1/5.snapshot", "state/0/1/8.delta"]
    # Batch 7 is committed: the next batch loads version 8 of every operator.
    assert restored.empty_state == (EmptyState("vwap_out", 1, 8),)


def test_a_stateful_node_inserted_downstream_moves_the_existing_state_to_the_next_id():
    plan = plan_restore(OLD, new({"vwap_out": query(("vwap_state", VWAP), ("late", SEEN))},
                                 ("trades", "vwap_state", "late", "vwap_out")))
    assert only(plan, "vwap_state").old == StateRef("vwap_out", 0)
    assert only(plan, "vwap_state").new == StateRef("vwap_out", 1)
    assert only(plan, "late").new == StateRef("vwap_out", 0)
    restored = remap_files(plan, {"vwap_out": query_files("vwap_out", 1), "enriched_out": query_files("enriched_out", 0)})
    vwap_out = restored.files["vwap_out"]
    assert vwap_out["state/1/0/8.delta"] == entry("vwap_out:state/0/0/8.delta")
    assert vwap_out["state/1/0/_metadata/schema"] == entry("vwap_out:state/0/0/_metadata/schema")
    assert not any(path.startswith("state/0/") or "/_metadata/metadata" in path for path in vwap_out)
    assert restored.empty_state == (EmptyState("vwap_out", 0, 8),)
    assert "enriched_out" not in restored.files     # removed branch: nothing restored for it


def test_a_removed_stateful_node_is_dropped_and_reported():
    old = layout({"vwap_out": query(("dedupe", SEEN), ("vwap_state", VWAP))}, ("trades", "dedupe", "vwap_state", "vwap_out"))
    plan = plan_restore(old, new({"vwap_out": query(("vwap_state", VWAP))}, ("trades", "vwap_state", "vwap_out")))
    assert not plan.refused
    dropped = only(plan, "dedupe")
    assert (dropped.action, dropped.old, dropped.reason) == (
        Action.DROP, StateRef("vwap_out", 1), "only in the checkpoint: its state is ignored")
    restored = remap_files(plan, {"vwap_out": query_files("vwap_out", 2)})
    assert not any(path.startswith("state/1/") for path in restored.files["vwap_out"])
    assert "state/0/_metadata/metadata" not in restored.files["vwap_out"]   # the operators changed
    assert restored.empty_state == ()


def test_renaming_a_stateful_node_is_how_to_ask_for_fresh_state():
    plan = plan_restore(OLD, new({"vwap_out": query(("vwap_state_v2", VWAP))}, ("trades", "vwap_state_v2", "vwap_out")))
    assert only(plan, "vwap_state").action is Action.DROP
    assert (only(plan, "vwap_state_v2").action, only(plan, "vwap_state_v2").reason) == (
        Action.FRESH, "new stateful node: starts with empty state")
    # The query still continues its input position: the fresh node sees new events only.
    assert plan.queries[0].origin == "vwap_out"
    assert remap_files(plan, {"vwap_out": query_files("vwap_out", 1)}).empty_state == (EmptyState("vwap_out", 0, 8),)


def test_a_node_moved_to_another_branch_takes_its_input_position_along_but_not_the_query_id():
    old = layout({"vwap_out": query(("vwap_state", VWAP)), "enriched_out": query()},
                 OLD.node_names, batches={"vwap_out": 7, "enriched_out": 9})
    moved = new({"vwap_out": query(), "enriched_out": query(("vwap_state", VWAP))},
                ("trades", "vwap_state", "enriched_out", "vwap_out"))
    plan = plan_restore(old, moved)
    assert not plan.refused
    node = only(plan, "vwap_state")
    assert (node.action, node.old, node.new) == (Action.KEEP, StateRef("vwap_out", 0), StateRef("enriched_out", 0))
    assert "moved from vwap_out/state/0" in node.reason
    by_name = {q.name: q for q in plan.queries}
    assert (by_name["enriched_out"].origin, by_name["enriched_out"].batch_id) == ("vwap_out", 7)
    assert by_name["enriched_out"].reason == "continues after batch 7 of query vwap_out"
    assert (by_name["vwap_out"].origin, by_name["vwap_out"].keep_operator_metadata) == ("vwap_out", False)
    files = {"vwap_out": query_files("vwap_out", 1), "enriched_out": query_files("enriched_out", 0)}
    remapped = remap_files(plan, files)
    restored = remapped.files
    assert restored["enriched_out"]["offsets/7"] == files["vwap_out"]["offsets/7"]
    assert restored["enriched_out"]["state/0/1/8.delta"] == files["vwap_out"]["state/0/1/8.delta"]
    # It needs a new query id: vwap_out, with the old one, runs beside it.
    assert "metadata" not in restored["enriched_out"]
    assert remapped.fresh_metadata == ("enriched_out",)
    assert restored["vwap_out"]["metadata"] == files["vwap_out"]["metadata"]
    assert not any(path.startswith("state/") for path in restored["vwap_out"])


def test_a_new_branch_reads_its_source_from_the_beginning():
    plan = plan_restore(OLD, new({**OLD.queries, "counts_out": query(("counts", VWAP))},
                                 OLD.node_names + ("counts", "counts_out")))
    counts_out = plan.queries[-1]
    assert (counts_out.origin, counts_out.reason) == (None, "new query: reads trades from the beginning")
    assert only(plan, "counts").action is Action.FRESH
    assert only(plan, "counts_out").reason == "new node (no state)"
    restored = remap_files(plan, {"vwap_out": query_files("vwap_out", 1), "enriched_out": query_files("enriched_out", 0)})
    assert "counts_out" not in restored.files and restored.empty_state == ()


@pytest.mark.parametrize(("schema", "change"), [
    (StateSchema((Column("sym", "string"), Column("venue", "string")), VWAP.value),
     "key changed from (sym string) to (sym string, venue string)"),
    (StateSchema(SYM, (Column("volume", "bigint", "max(size)"), VWAP.value[1])),
     "value column volume changed from sum(size) to max(size)"),
    (StateSchema(SYM, (Column("volume", "double", "sum(size)"), VWAP.value[1])),
     "value column volume changed type from bigint to double"),
    (StateSchema(SYM, VWAP.value + (Column("notional", "double", "sum(price * size)"),)),
     "value column notional added"),
    (StateSchema(SYM, VWAP.value[::-1]),
     "value columns reordered from (volume bigint, trades bigint) to (trades bigint, volume bigint)"),
])
def test_a_node_whose_state_no_longer_fits_is_refused_naming_the_change(schema, change):
    plan = plan_restore(OLD, new({"vwap_out": query(("vwap_state", schema))}, ("trades", "vwap_state", "vwap_out")))
    assert plan.refused
    assert only(plan, "vwap_state").action is Action.REFUSE
    assert plan.refusals() == [f"vwap_state: {change}: its state no longer fits (rename the node to start it fresh)"]
    with pytest.raises(PlanRefused, match="vwap_state: "):
        remap_files(plan, {})


def test_a_window_of_another_size_under_the_same_name_is_other_state():
    def window(size: str) -> StateSchema:
        key = (Column("window", "struct<start:timestamp,end:timestamp>", f"window(time, {size}, {size})"),) + SYM
        return StateSchema(key, VWAP.value)
    assert schema_changes(window("1 minute"), window("5 minutes")) == [
        "key changed from (window struct<start:timestamp,end:timestamp> = window(time, 1 minute, 1 minute), "
        "sym string) to (window struct<start:timestamp,end:timestamp> = window(time, 5 minutes, 5 minutes), "
        "sym string)"]


def test_schema_changes_lists_every_change():
    changed = StateSchema((Column("sym", "bigint"),), (Column("trades", "bigint", "count(1)"),))
    assert schema_changes(VWAP, changed) == [
        "key changed from (sym string) to (sym bigint)", "value column volume removed"]
    assert schema_changes(VWAP, VWAP) == []


def test_a_kept_node_whose_branch_reads_another_source_is_refused():
    quotes = 'source.log:{"log":"quotes"}'
    plan = plan_restore(OLD, new({"vwap_out": query(("vwap_state", VWAP), source="quotes", identity=quotes)},
                                 ("quotes", "vwap_state", "vwap_out")))
    assert only(plan, "vwap_state").reason == (
        "its state was built from source trades, but its branch now reads quotes (rename the node to start it fresh)")
    assert (only(plan, "quotes").action, only(plan, "trades").action) == (Action.FRESH, Action.DROP)


def test_a_source_that_reads_other_input_under_its_old_name_is_refused():
    other = 'source.log:{"log":"trades_2025"}'
    plan = plan_restore(OLD, new({"enriched_out": query(identity=other)}, ("trades", "enrich", "enriched_out")))
    assert only(plan, "trades").action is Action.REFUSE
    assert "its offsets do not apply" in only(plan, "trades").reason


def test_state_from_two_old_queries_cannot_share_one_new_query():
    old = layout({"a_out": query(("a", SEEN)), "b_out": query(("b", VWAP))}, ("trades", "a", "a_out", "b", "b_out"))
    plan = plan_restore(old, new({"b_out": query(("a", SEEN), ("b", VWAP))}, ("trades", "a", "b", "b_out")))
    assert [d.action for d in plan.nodes if d.node in ("a", "b")] == [Action.REFUSE, Action.REFUSE]
    assert "state from queries a_out and b_out would share query b_out" in only(plan, "a").reason
    assert plan.queries[0].origin is None


def test_a_node_shared_by_two_branches_keeps_the_state_of_each_query():
    both = {"x_out": query(("vwap_state", VWAP)), "y_out": query(("vwap_state", VWAP))}
    old = layout(both, ("trades", "vwap_state", "x_out", "y_out"))
    plan = plan_restore(old, new(both, old.node_names))
    assert [(d.action, d.old, d.new) for d in decisions(plan, "vwap_state")] == [
        (Action.KEEP, StateRef("x_out", 0), StateRef("x_out", 0)),
        (Action.KEEP, StateRef("y_out", 0), StateRef("y_out", 0))]
    # One branch removed: its copy of the state is reported as unused.
    plan = plan_restore(old, new({"x_out": both["x_out"]}, ("trades", "vwap_state", "x_out")))
    assert [(d.action, d.reason) for d in decisions(plan, "vwap_state")] == [
        (Action.KEEP, "same key and value columns"), (Action.DROP, "its copy in this query is not used")]


def test_a_node_that_is_no_longer_stateful_drops_its_state():
    plan = plan_restore(OLD, new({"vwap_out": query()}, ("trades", "vwap_state", "vwap_out")))
    assert [(d.action, d.reason) for d in decisions(plan, "vwap_state")] == [
        (Action.DROP, "no longer stateful: its state is ignored")]


def test_stateless_nodes_are_kept_added_or_removed_without_state():
    plan = plan_restore(OLD, new(OLD.queries, ("trades", "enriched_out", "clean", "vwap_state", "vwap", "vwap_out")))
    assert (only(plan, "clean").action, only(plan, "clean").reason) == (Action.FRESH, "new node (no state)")
    assert (only(plan, "enrich").action, only(plan, "enrich").reason) == (
        Action.DROP, "only in the checkpoint (no state)")
    assert only(plan, "vwap").reason == "no state"


def test_finished_nodes_refuse_a_changed_graph_unless_forced():
    finished = layout(OLD.queries, OLD.node_names, finished=frozenset({"trades"}))
    changed = new(OLD.queries, OLD.node_names, fingerprint="f-new")
    refused = plan_restore(finished, changed)
    assert refused.refused
    assert refused.problems[0].startswith("the checkpoint holds finished nodes (trades) and the pipeline changed "
                                          "(fingerprint f-old -> f-new)")
    assert "SP_FORCE_GRAPH_CHANGE=true" in refused.problems[0]
    forced = plan_restore(finished, changed, force=True)
    assert not forced.refused and "restoring anyway" in forced.warnings[0]
    assert not plan_restore(finished, new(OLD.queries, OLD.node_names, fingerprint="f-old")).refused


def manifest(layouts: dict[str, QueryLayout | None], fingerprint: str = "f-old") -> Manifest:
    return Manifest(checkpoint_id=12, worker_id="worker-0", created_at=1.0, duration_ms=1.0, bytes_copied=0,
                    node_names=OLD.node_names, pipeline_fingerprint=fingerprint,
                    queries=tuple(QueryCut(name, 7, {"0": 10}, {}, lay) for name, lay in layouts.items()))


def test_a_manifest_plans_with_its_recorded_layout():
    plan = plan_manifest(manifest(dict(OLD.queries)), new({"vwap_out": query(("renamed", VWAP))},
                                                          ("trades", "renamed", "vwap_out")))
    assert (only(plan, "vwap_state").action, only(plan, "renamed").action) == (Action.DROP, Action.FRESH)


def test_a_manifest_without_layouts_restores_only_into_the_unchanged_pipeline():
    legacy = manifest({"vwap_out": None, "enriched_out": None})
    same = plan_manifest(legacy, new(OLD.queries, OLD.node_names, fingerprint="f-old"))
    assert not same.refused
    assert {d.action for d in same.nodes} == {Action.KEEP}
    assert [q.batch_id for q in same.queries] == [7, 7]
    changed = plan_manifest(legacy, new(OLD.queries, OLD.node_names, fingerprint="f-new"))
    assert changed.refused
    assert changed.refusals() == [
        "checkpoint 12 does not record which state belongs to which node (it was written by an older Sparkpoint), "
        "so it can only be restored into the pipeline it was taken with (fingerprint f-old, this one is f-new)"]


# --- sinks that share a query ----------------------------------------------------------------

def sinks_query(*sinks: str) -> QueryLayout:
    return QueryLayout("trades", TRADES, (), sinks)


SHARED_NODES = ("trades", "enrich", "enriched_pg", "enriched_out")


def manifest_of(queries: dict[str, QueryLayout]) -> Manifest:
    return Manifest(4, "worker-0", 0.0, 0.0, 0, SHARED_NODES,
                    tuple(QueryCut(name, batch, {}, {}, layout) for (name, layout), batch
                          in zip(queries.items(), (7, 9))), "f-old")


def test_sinks_cut_in_queries_of_their_own_cannot_continue_in_one_shared_query():
    # Written before manifests recorded sinks: each query was one branch, named after its sink.
    old = manifest_of({"enriched_pg": query(), "enriched_out": query()})
    plan = plan_manifest(old, new({"enrich": sinks_query("enriched_pg", "enriched_out")}, SHARED_NODES))
    assert plan.refused
    assert plan.refusals() == [
        f"sink {sink} was cut in query {sink} and would run in query enrich: its output so far is counted in "
        f"{sink}'s batches; restore into a pipeline that keeps it in query {sink}, or start on empty checkpoint "
        "volumes and sink targets" for sink in ("enriched_pg", "enriched_out")]


def test_a_sink_leaving_a_shared_query_is_refused_and_one_joining_it_continues_it():
    old = manifest_of({"enrich": sinks_query("enriched_pg", "enriched_out")})
    split = plan_manifest(old, new({"enrich": sinks_query("enriched_pg"), "enriched_out": sinks_query("enriched_out")},
                                   SHARED_NODES))
    assert split.refusals() == [
        "sink enriched_out was cut in query enrich and would run in query enriched_out: its output so far is "
        "counted in enrich's batches; restore into a pipeline that keeps it in query enrich, or start on empty "
        "checkpoint volumes and sink targets"]
    joined = plan_manifest(old, new({"enrich": sinks_query("enriched_pg", "enriched_out", "audit_out")},
                                    SHARED_NODES + ("audit_out",)))
    assert not joined.refused
    [decision] = joined.queries
    assert (decision.name, decision.origin, decision.batch_id) == ("enrich", "enrich", 7)
