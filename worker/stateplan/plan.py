"""What a restore into a (possibly changed) pipeline does, node by node.

Pure: two layouts in, a plan out. State is matched by node name (like
Flink's ``uid``): a stateful node in both keeps its state if its key and value columns are
unchanged and it still reads the same source; a new (or renamed) node starts
fresh; a node only in the checkpoint is dropped and reported. The rules, and
why a new query continues exactly one old query, are in docs/state-mapping.md.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, replace

from worker.checkpointing.layout import Column, QueryLayout, StatefulNode, StateSchema
from worker.checkpointing.manifest import Manifest
from worker.stateplan.layout import PipelineLayout, checkpoint_layout


class Action(str, enum.Enum):
    KEEP = "keep"
    FRESH = "fresh"
    DROP = "drop"
    REFUSE = "refuse"


@dataclass(frozen=True)
class StateRef:
    """Where a node's state lives: ``<query>/state/<operator id>/``."""

    query: str
    operator_id: int

    def __str__(self) -> str:
        return f"{self.query}/state/{self.operator_id}"


@dataclass(frozen=True)
class NodeDecision:
    node: str
    action: Action
    reason: str
    old: StateRef | None = None     # its state in the checkpoint
    new: StateRef | None = None     # its state in the new pipeline


@dataclass(frozen=True)
class QueryDecision:
    name: str
    origin: str | None               # the checkpoint's query whose input position it continues
    batch_id: int | None             # the origin's last committed batch: it resumes after it
    keep_operator_metadata: bool     # same operators at the same ids as its origin (see remap)
    reason: str


@dataclass(frozen=True)
class RestorePlan:
    nodes: tuple[NodeDecision, ...]
    queries: tuple[QueryDecision, ...]
    problems: tuple[str, ...] = ()   # refusals that concern the whole restore
    warnings: tuple[str, ...] = ()

    @property
    def refused(self) -> bool:
        return bool(self.problems) or any(d.action is Action.REFUSE for d in self.nodes)

    def refusals(self) -> list[str]:
        return list(self.problems) + [f"{d.node}: {d.reason}" for d in self.nodes if d.action is Action.REFUSE]

    def counts(self) -> Counter[Action]:
        return Counter(d.action for d in self.nodes)


def _columns(columns: tuple[Column, ...], expressions: bool = False) -> str:
    """Names and types; with ``expressions``, those a column has (a window
    key's: its kind and durations)."""
    return ", ".join(f"{c.name} {c.type}" + (f" = {c.expression}" if expressions and c.expression else "")
                     for c in columns)


def schema_changes(old: StateSchema, new: StateSchema) -> list[str]:
    """What changed between two states' columns, one phrase each; empty if nothing did."""
    changes = []
    if old.key != new.key:
        changes.append(f"key changed from ({_columns(old.key, True)}) to ({_columns(new.key, True)})")
    before = {c.name: c for c in old.value}
    after = {c.name: c for c in new.value}
    for name in before.keys() - after.keys():
        changes.append(f"value column {name} removed")
    for name in after.keys() - before.keys():
        changes.append(f"value column {name} added")
    for name in before.keys() & after.keys():
        if before[name].expression != after[name].expression:
            changes.append(f"value column {name} changed from {before[name].expression} "
                           f"to {after[name].expression}")
        elif before[name].type != after[name].type:
            changes.append(f"value column {name} changed type from {before[name].type} to {after[name].type}")
    if not changes and old.value != new.value:
        # Spark's state holds the aggregation buffers by position.
        changes.append(f"value columns reordered from ({_columns(old.value)}) to ({_columns(new.value)})")
    return sorted(changes)


def _graph_change(old: PipelineLayout, new: PipelineLayout, force: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Problems and warnings about finished nodes (KX: a changed graph would
    'unfinish' them, with undefined behaviour or duplicate output)."""
    if not old.finished or old.fingerprint == new.fingerprint:
        return (), ()
    finished = ", ".join(sorted(old.finished))
    if force:
        return (), (f"the checkpoint holds finished nodes ({finished}) and the pipeline changed; restoring anyway "
                    "because SP_FORCE_GRAPH_CHANGE=true: they resume from their last state and may emit output "
                    "again",)
    return (f"the checkpoint holds finished nodes ({finished}) and the pipeline changed (fingerprint "
            f"{old.fingerprint} -> {new.fingerprint}): restoring would restart them with undefined results; "
            "set SP_FORCE_GRAPH_CHANGE=true to restore anyway",), ()


class _Planner:
    """Builds one plan; holds the two layouts and what was decided so far."""

    def __init__(self, old: PipelineLayout, new: PipelineLayout) -> None:
        self.old = old
        self.new = new
        # Node name -> {old query -> (operator id, node)}: a node shared by two
        # branches has a state in each of their queries.
        self.old_state: dict[str, dict[str, tuple[int, StatefulNode]]] = {}
        for query, layout in old.queries.items():
            ids = layout.operator_ids()
            for node in layout.stateful:
                self.old_state.setdefault(node.name, {})[query] = (ids[node.name], node)
        self.stateful: dict[tuple[str, str], NodeDecision] = {}   # (node, new query) -> decision

    def stateful_node(self, query: str, layout: QueryLayout, node: StatefulNode, operator_id: int) -> NodeDecision:
        target = StateRef(query, operator_id)
        copies = self.old_state.get(node.name, {})
        if not copies:
            was = "was stateless" if node.name in self.old.node_names else "new stateful node"
            return NodeDecision(node.name, Action.FRESH, f"{was}: starts with empty state", new=target)
        # Its state in the query of the same name if it was there, else its only
        # (or, for a node that was shared, its first) copy.
        origin = query if query in copies else sorted(copies)[0]
        old_id, old_node = copies[origin]
        source = StateRef(origin, old_id)
        changes = schema_changes(old_node.schema, node.schema)
        if changes:
            return NodeDecision(node.name, Action.REFUSE, f"{'; '.join(changes)}: its state no longer fits "
                                "(rename the node to start it fresh)", source, target)
        old_source = self.old.queries[origin].source
        if old_source != layout.source:
            return NodeDecision(node.name, Action.REFUSE, f"its state was built from source {old_source}, but its "
                                f"branch now reads {layout.source} (rename the node to start it fresh)",
                                source, target)
        moved = "" if source == target else f", moved from {source}"
        return NodeDecision(node.name, Action.KEEP, f"same key and value columns{moved}", source, target)

    def refuse_mixed_origins(self) -> None:
        """A query can continue only one old query's input position."""
        for query in self.new.queries:
            kept = [d for (_, q), d in self.stateful.items() if q == query and d.action is Action.KEEP]
            origins = sorted({d.old.query for d in kept})
            if len(origins) > 1:
                reason = (f"state from queries {' and '.join(origins)} would share query {query}, but each was cut "
                          "at its own input position: keep these nodes in separate branches, or rename some to "
                          "start them fresh")
                for decision in kept:
                    self.stateful[(decision.node, query)] = replace(decision, action=Action.REFUSE, reason=reason)

    def query(self, name: str, layout: QueryLayout) -> QueryDecision:
        decisions = [d for (_, q), d in self.stateful.items() if q == name]
        origins = {d.old.query for d in decisions if d.action is Action.KEEP}
        if any(d.action is Action.REFUSE for d in decisions):
            return QueryDecision(name, None, None, False, "refused (see its nodes)")
        if origins:
            origin = origins.pop()
        elif name in self.old.queries and self.old.queries[name].source == layout.source:
            origin = name
        else:
            old = self.old.queries.get(name)
            why = "new query" if old is None else f"its source changed from {old.source}"
            return QueryDecision(name, None, None, False, f"{why}: reads {layout.source} from the beginning")
        batch = self.old.batches.get(origin)
        unchanged = (origin == name and all(d.action is Action.KEEP for d in decisions)
                     and [n.name for n in self.old.queries[origin].stateful] == [n.name for n in layout.stateful])
        where = "" if origin == name else f" of query {origin}"
        return QueryDecision(name, origin, batch, unchanged, f"continues after batch {batch}{where}")

    def source(self, name: str, identity: str) -> NodeDecision:
        old = {q.source: q.source_identity for q in self.old.queries.values()}
        if name not in old:
            return NodeDecision(name, Action.FRESH, "new source")
        if old[name] != identity:
            return NodeDecision(name, Action.REFUSE, f"reads {identity} now, but read {old[name]} when the checkpoint "
                                "was taken: its offsets do not apply (rename the source to read the new input "
                                "from the beginning)")
        return NodeDecision(name, Action.KEEP, "same input")

    def unused_state(self, name: str) -> list[NodeDecision]:
        """The checkpoint's states of ``name`` that no node keeps."""
        kept = {d.old.query for (node, _), d in self.stateful.items() if node == name and d.old is not None}
        in_new = any(n.name == name for q in self.new.queries.values() for n in q.stateful)
        reason = ("its copy in this query is not used" if in_new
                  else "no longer stateful: its state is ignored" if name in self.new.node_names
                  else "only in the checkpoint: its state is ignored")
        return [NodeDecision(name, Action.DROP, reason, old=StateRef(query, operator_id))
                for query, (operator_id, _) in sorted(self.old_state.get(name, {}).items()) if query not in kept]

    def moved_sinks(self) -> tuple[str, ...]:
        """Sinks that run in another query than they were cut with: a sink's
        position in its input, and the batch ids its target's mark counts,
        are its query's (two queries cut separately cannot become one)."""
        was = {sink: query for query, layout in self.old.queries.items() for sink in layout.sinks}
        return tuple(
            f"sink {sink} was cut in query {was[sink]} and would run in query {query}: its output so far is counted "
            f"in {was[sink]}'s batches; restore into a pipeline that keeps it in query {was[sink]}, or start on "
            "empty checkpoint volumes and sink targets"
            for query, layout in self.new.queries.items() for sink in layout.sinks
            if sink in was and was[sink] != query)

    def plan(self, force: bool) -> RestorePlan:
        for query, layout in self.new.queries.items():
            ids = layout.operator_ids()
            for node in layout.stateful:
                self.stateful[(node.name, query)] = self.stateful_node(query, layout, node, ids[node.name])
        self.refuse_mixed_origins()
        sources = {q.source: q.source_identity for q in self.new.queries.values()}
        nodes: list[NodeDecision] = []
        for name in self.new.node_names:
            if name in sources:
                nodes.append(self.source(name, sources[name]))
            own = [d for (node, _), d in self.stateful.items() if node == name]
            nodes.extend(own)
            if name not in sources and not own and name not in self.old_state:
                known = name in self.old.node_names
                nodes.append(NodeDecision(name, Action.KEEP if known else Action.FRESH,
                                          "no state" if known else "new node (no state)"))
            nodes.extend(self.unused_state(name))
        for name in self.old.node_names:
            if name not in self.new.node_names:
                nodes.extend(self.unused_state(name)
                             or [NodeDecision(name, Action.DROP, "only in the checkpoint (no state)")])
        problems, warnings = _graph_change(self.old, self.new, force)
        problems += self.moved_sinks()
        queries = tuple(self.query(name, layout) for name, layout in self.new.queries.items())
        return RestorePlan(tuple(nodes), queries, problems, warnings)


def plan_restore(old: PipelineLayout, new: PipelineLayout, *, force: bool = False) -> RestorePlan:
    """The plan for restoring a checkpoint taken with ``old`` into ``new``.
    ``force``: SP_FORCE_GRAPH_CHANGE (restore a changed graph over finished nodes)."""
    return _Planner(old, new).plan(force)


def plan_manifest(manifest: Manifest, new: PipelineLayout, *, force: bool = False) -> RestorePlan:
    """``plan_restore`` for a checkpoint's manifest. A manifest from before
    layouts were recorded can only be restored into the unchanged pipeline,
    whose layout is then the checkpoint's."""
    old = checkpoint_layout(manifest)
    if old is None:
        if manifest.pipeline_fingerprint != new.fingerprint:
            return RestorePlan((), (), problems=(
                f"checkpoint {manifest.checkpoint_id} does not record which state belongs to which node (it was "
                "written by an older Sparkpoint), so it can only be restored into the pipeline it was taken with "
                f"(fingerprint {manifest.pipeline_fingerprint}, this one is {new.fingerprint})",))
        batches = {q.name: q.batch_id for q in manifest.queries}
        old = replace(new, queries={q: layout for q, layout in new.queries.items() if q in batches},
                      batches=batches, finished=frozenset(manifest.finished_nodes))
    return plan_restore(old, new, force=force)
