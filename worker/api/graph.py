"""The pipeline graph: named nodes chained with ``|`` into branches.

Pure data, no Spark: a graph can be built, named, fingerprinted and compared
(for ``plan`` and for tests) without a Spark session. Node names are the
identity of state across restarts and pipeline changes, like Flink's ``uid``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sparkpoint.messages import PipelineNode

NAME_PATTERN = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")


class PipelineError(ValueError):
    """The pipeline definition is wrong; the message says where."""


@dataclass(eq=False)
class Node:
    """One operator. ``name`` is None until the pipeline assigns a default."""

    kind: str                       # e.g. "source.log", "map", "aggregate", "sink.files"
    params: dict[str, Any]          # JSON-able description: part of the fingerprint
    name: str | None = None
    fn: Callable[..., Any] | None = field(default=None, repr=False)

    @property
    def is_source(self) -> bool:
        return self.kind.startswith("source.")

    @property
    def is_sink(self) -> bool:
        return self.kind.startswith("sink.")

    @property
    def is_stateful(self) -> bool:
        return self.kind in ("aggregate", "window", "deduplicate")

    @property
    def is_aggregation(self) -> bool:
        """A running aggregate or a window: each branch has at most one."""
        return self.kind in ("aggregate", "window")

    @property
    def watermark(self) -> str | None:
        """The event-time column this node declares a watermark on (a
        source's ``watermark=``, or ``sp.watermark``), if any."""
        return self.params.get("watermark") if self.is_source or self.kind == "watermark" else None

    @property
    def is_upsert(self) -> bool:
        """A PostgreSQL sink upserting on a key (``to_postgres(key=, version=)``)."""
        return self.kind == "sink.postgres" and "key" in self.params


class Operator:
    """An unattached node; ``stream | operator`` attaches it."""

    def __init__(self, node: Node) -> None:
        self.node = node


class Stream:
    """A chain of nodes starting at a source."""

    def __init__(self, nodes: tuple[Node, ...]) -> None:
        self.nodes = nodes

    def __or__(self, other: Operator) -> Stream:
        if not isinstance(other, Operator):
            raise PipelineError(f"cannot pipe a stream into {type(other).__name__}: expected an operator "
                                "such as sp.map(...) or sp.write.to_files(...)")
        if self.nodes[-1].is_sink:
            raise PipelineError(f"nothing can follow the sink {self.nodes[-1].name or self.nodes[-1].kind}")
        if other.node.is_source:
            raise PipelineError("a source cannot be piped into")
        return Stream(self.nodes + (other.node,))

    @property
    def sink(self) -> Node:
        return self.nodes[-1]

    @property
    def bounded(self) -> bool:
        """Whether the branch reads a bounded source: its query finishes at the end of its input."""
        return bool(self.nodes[0].params.get("bounded"))

    @property
    def aggregate(self) -> Node | None:
        """The branch's aggregation: a running aggregate or a window."""
        return next((node for node in self.nodes if node.is_aggregation), None)

    @property
    def emits_updates(self) -> bool:
        """Whether the branch aggregates and each batch writes only the keys
        (or windows) it changed (Spark's update mode): ``emit="updates"``,
        and an ``sp.aggregate`` into an upsert sink by default."""
        aggregate = self.aggregate
        if aggregate is None:
            return False
        emit = aggregate.params.get("emit")
        return emit == "updates" if emit else self.sink.is_upsert

    @property
    def complete(self) -> bool:
        """Whether each batch the branch writes is the whole result table of
        its aggregate (Spark's complete mode): ``emit="table"``, and by default
        an ``sp.aggregate`` into any sink but an upsert. (A window emits
        ``"final"`` windows or ``"updates"``, never the table.)"""
        aggregate = self.aggregate
        return aggregate is not None and aggregate.kind == "aggregate" and not self.emits_updates

    @property
    def publishes_immediately(self) -> bool:
        """Whether the branch's output is published as batches come (upsert,
        console), not on checkpoint completion."""
        return self.sink.kind == "sink.console" or self.sink.is_upsert


@dataclass(frozen=True)
class Query:
    """One Spark query: a branch, named after its sink; or branches that
    share one (``Pipeline.queries``), named after the node before their sinks."""

    name: str
    branches: tuple[Stream, ...]

    @property
    def stem(self) -> tuple[Node, ...]:
        """The nodes before the sinks: the same in every branch of the query."""
        return self.branches[0].nodes[:-1]

    @property
    def sinks(self) -> tuple[Node, ...]:
        return tuple(branch.sink for branch in self.branches)

    @property
    def nodes(self) -> tuple[Node, ...]:
        return self.stem + self.sinks

    @property
    def source(self) -> Node:
        return self.stem[0]

    @property
    def stateful(self) -> tuple[Node, ...]:
        return tuple(node for node in self.stem if node.is_stateful)

    @property
    def bounded(self) -> bool:
        return self.branches[0].bounded

    @property
    def complete(self) -> bool:
        return self.branches[0].complete

    @property
    def publishes_immediately(self) -> bool:
        return self.branches[0].publishes_immediately


def _check_emit(branch: Stream) -> None:
    """Updates only into a sink that takes them: an upsert replaces each
    key's row, Kafka and the console pass each change on; files and a
    transactional table would append a row per change of a key."""
    sink = branch.sink
    if not branch.emits_updates or sink.kind in ("sink.kafka", "sink.console") or sink.is_upsert:
        return
    what = "files" if sink.kind == "sink.files" else "a transactional PostgreSQL table"
    instead = ("emit='final' (each window once, when the watermark passes its end)" if branch.aggregate.kind == "window"
               else "emit='table' (the whole table each batch)")
    raise PipelineError(
        f"node {branch.aggregate.name!r}: emit='updates' writes only the keys each batch changed, but sink "
        f"{sink.name!r} ({what}) appends what it is given, so a key would get a row per change: use "
        f"{instead} or an upsert sink (sp.write.to_postgres(table, key=, version=))")


def _check_event_time(branch: Stream) -> None:
    """What needs a watermark has one upstream, on its own column."""
    watermark: str | None = None
    for node in branch.nodes:
        watermark = node.watermark or watermark
        if node.kind == "window" and node.params["emit"] == "final" and watermark != node.params["time"]:
            raise PipelineError(
                f"node {node.name!r}: a final window is emitted when the watermark passes its end, and "
                + (f"the watermark is on {watermark!r}, not {node.params['time']!r}" if watermark else
                   "no watermark is declared before it")
                + f": declare one on {node.params['time']!r} (watermark=/lateness= on the source, or "
                  "sp.watermark())" + ("" if "gap" in node.params else ", or emit='updates'"))
        if node.kind == "deduplicate" and node.params.get("within_watermark") and watermark is None:
            raise PipelineError(f"node {node.name!r}: deduplicate(within_watermark=True) forgets keys once the "
                                "watermark passes them, and no watermark is declared before it: declare one "
                                "(watermark=/lateness= on the source, or sp.watermark())")


def _shares_a_query(branch: Stream) -> bool:
    """Branches that can share a query with others of the same stem:
    stateless, unbounded and published on checkpoint completion. Each
    query costs Spark's planning on every trigger; these would differ in
    nothing but their sinks. (Stateful branches keep their own queries:
    their state is mapped by query and node name.)"""
    return not (any(node.is_stateful for node in branch.nodes) or branch.bounded or branch.publishes_immediately)


def _code_digest(code: Any, digest: Any) -> None:
    """Feed a code object into ``digest``: bytecode, names, constants, and
    nested code (comprehensions, lambdas) recursively -- never a repr that
    holds a memory address."""
    digest.update(code.co_code)
    digest.update(repr((code.co_names, code.co_varnames)).encode())
    for const in code.co_consts:
        if hasattr(const, "co_code"):
            _code_digest(const, digest)
        else:
            digest.update(repr(const).encode())


def _function_identity(fn: Callable[..., Any]) -> str:
    """Name plus a digest of the code: editing a function changes the fingerprint."""
    code = getattr(fn, "__code__", None)
    digest = hashlib.sha256()
    if code is not None:
        _code_digest(code, digest)
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}#{digest.hexdigest()[:12]}"


@dataclass(frozen=True)
class Pipeline:
    """Branches, each a source-to-sink chain; a Spark query per branch, or per
    branches that share one (``queries``)."""

    branches: tuple[Stream, ...]

    @classmethod
    def of(cls, *branches: Stream) -> Pipeline:
        if not branches:
            raise PipelineError("sp.run() needs at least one stream ending in a sink")
        for branch in branches:
            if not isinstance(branch, Stream):
                raise PipelineError(f"sp.run() takes streams, got {type(branch).__name__}")
            if not branch.sink.is_sink:
                raise PipelineError(
                    f"the stream from {branch.nodes[0].name or branch.nodes[0].kind} does not end in a sink: "
                    "add | sp.write.to_files(...) or another sink")
        pipeline = cls(tuple(branches))
        pipeline._assign_names()
        for branch in branches:
            _check_event_time(branch)
            _check_emit(branch)
        return pipeline

    def queries(self) -> tuple[Query, ...]:
        """The pipeline's Spark queries, in branch order: one per branch, but
        branches that differ only in their sinks and may share a query
        (``_shares_a_query``) share one, named after the node before their
        sinks (a node name, so never a sink's, and unique among queries)."""
        stems: dict[tuple[int, ...], list[Stream]] = {}
        for branch in self.branches:
            key = tuple(id(node) for node in branch.nodes[:-1]) if _shares_a_query(branch) else (id(branch),)
            stems.setdefault(key, []).append(branch)
        queries = tuple(Query(group[0].sink.name if len(group) == 1 else group[0].nodes[-2].name, tuple(group))
                        for group in stems.values())
        names = [query.name for query in queries]
        if len(set(names)) < len(names):
            twice = sorted({name for name in names if names.count(name) > 1})
            raise PipelineError(f"node {twice[0]!r} is piped from two different streams: use an operator once")
        return queries

    def nodes(self) -> list[Node]:
        """Every node once, in order of first appearance."""
        seen: dict[int, Node] = {}
        for branch in self.branches:
            for node in branch.nodes:
                seen.setdefault(id(node), node)
        return list(seen.values())

    def _assign_names(self) -> None:
        taken: dict[str, Node] = {}
        for node in self.nodes():
            if node.name is None:
                continue
            if not NAME_PATTERN.match(node.name):
                raise PipelineError(
                    f"node name {node.name!r} is not allowed: use letters, digits, '_', '.', '-', "
                    "starting with a letter, at most 64 characters")
            if node.name in taken:
                raise PipelineError(f"two nodes are named {node.name!r}: names must be unique")
            taken[node.name] = node
        # Deterministic defaults from kind and position in the graph.
        for position, node in enumerate(self.nodes()):
            if node.name is None:
                name = f"{node.kind.split('.')[-1]}_{position}"
                if name in taken:
                    raise PipelineError(f"the default name {name!r} of a {node.kind} node clashes with an "
                                        "explicit name: name the node")
                node.name = name
                taken[name] = node

    def finished_nodes(self, finished_branches: set[str]) -> tuple[str, ...]:
        """Nodes every branch of which has finished (branches are named after
        their sinks), in pipeline order: a source read by a running branch
        too is not finished yet."""
        running = {id(node) for branch in self.branches if branch.sink.name not in finished_branches
                   for node in branch.nodes}
        return tuple(node.name for node in self.nodes()
                     if id(node) not in running and any(node in b.nodes for b in self.branches
                                                        if b.sink.name in finished_branches))

    def node(self, name: str) -> Node:
        for node in self.nodes():
            if node.name == name:
                return node
        raise KeyError(name)

    def _inputs(self) -> dict[str, list[str]]:
        """Each node's upstream nodes, by name."""
        inputs: dict[str, list[str]] = {}
        for branch in self.branches:
            for upstream, node in zip(branch.nodes, branch.nodes[1:]):
                names = inputs.setdefault(node.name, [])
                if upstream.name not in names:
                    names.append(upstream.name)
        return inputs

    def graph(self) -> tuple[PipelineNode, ...]:
        """Every node with its kind, whether it keeps state, and its inputs:
        what the controller's status page draws."""
        inputs = self._inputs()
        return tuple(PipelineNode(node.name, node.kind, node.is_stateful, tuple(inputs.get(node.name, ())))
                     for node in self.nodes())

    def describe(self) -> list[dict[str, Any]]:
        """A JSON-able description of every node and its inputs."""
        inputs = self._inputs()
        return [
            {
                "name": node.name,
                "kind": node.kind,
                "params": node.params,
                "function": _function_identity(node.fn) if node.fn is not None else None,
                "inputs": inputs.get(node.name, []),
            }
            for node in self.nodes()
        ]

    def fingerprint(self) -> str:
        canonical = json.dumps(self.describe(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]
