"""Where a checkpoint's files go when it is restored by a plan (pure: paths
in, paths out; the content, named by digest, does not change).

Per new query that continues an old one (its origin):
- the input position (``offsets/``, ``commits/``, ``sources/``) comes from the
  origin; the query id (``metadata``) only if the name is unchanged: two
  active queries may not share one, so a renamed query needs a new id
  (``fresh_metadata``; Spark refuses offsets without a ``metadata`` file);
- each kept node's ``state/<old id>/`` becomes ``state/<new id>/``; the
  states of dropped nodes, and of nodes kept in another query, stay behind;
- Spark's operator metadata (``state/<id>/_metadata/``) is left out unless the
  query has exactly its origin's operators at the same ids: with none, Spark
  skips its operator check and writes it afresh (docs/state-mapping.md);
- each fresh stateful node needs an empty state at the version the next
  batch loads (``EmptyState``; the files come from ``sparkfiles``).
A new query without an origin gets no files: Spark starts it from scratch.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from worker.checkpointing.manifest import FileEntry
from worker.stateplan.plan import Action, QueryDecision, RestorePlan

_STATE_PATH = re.compile(r"^state/(\d+)/(.+)$")


class PlanRefused(ValueError):
    """A refused plan has no layout; the message lists the refusals."""


@dataclass(frozen=True)
class EmptyState:
    """A fresh stateful node in a query that resumes after batch N: Spark
    loads version N+1 of every operator's state, so it must exist, empty."""

    query: str
    operator_id: int
    version: int


@dataclass(frozen=True)
class RestoreLayout:
    files: dict[str, dict[str, FileEntry]]   # new query -> path in its directory -> content
    empty_state: tuple[EmptyState, ...]
    fresh_metadata: tuple[str, ...]           # queries that need a new query id (sparkfiles.stream_metadata)


def _target(path: str, query: QueryDecision, moves: Mapping[int, int]) -> str | None:
    """Where the origin's file ``path`` goes in ``query``'s directory, or None."""
    state = _STATE_PATH.match(path)
    if state is None:
        return None if path == "metadata" and query.origin != query.name else path
    operator_id, rest = int(state.group(1)), state.group(2)
    if operator_id not in moves:
        return None
    if rest.startswith("_metadata/") and not query.keep_operator_metadata:
        return None
    return f"state/{moves[operator_id]}/{rest}"


def remap_files(plan: RestorePlan, files: Mapping[str, Mapping[str, FileEntry]]) -> RestoreLayout:
    """The new pipeline's files, from the checkpoint's ``files`` (query -> path -> content)."""
    if plan.refused:
        raise PlanRefused("; ".join(plan.refusals()))
    layout: dict[str, dict[str, FileEntry]] = {}
    empty: list[EmptyState] = []
    renamed: list[str] = []
    for query in plan.queries:
        if query.origin is None:
            continue
        here = [d for d in plan.nodes if d.new is not None and d.new.query == query.name]
        moves = {d.old.operator_id: d.new.operator_id for d in here if d.action is Action.KEEP}
        layout[query.name] = {target: entry for path, entry in files[query.origin].items()
                              if (target := _target(path, query, moves)) is not None}
        empty.extend(EmptyState(query.name, d.new.operator_id, query.batch_id + 1)
                     for d in here if d.action is Action.FRESH)
        if query.origin != query.name:
            renamed.append(query.name)
    return RestoreLayout(layout, tuple(empty), tuple(renamed))
