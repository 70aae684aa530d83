"""What a checkpoint records of each query's state, by node name: its source,
its stateful nodes with their key and value columns, and its sinks. Written into every
manifest by the worker (``worker.stateplan.layout`` derives it from the
pipeline) and read back by a restore, which maps state by these names.

Spark numbers a query's stateful operators from the sink upwards (pre-order
over the physical plan: see docs/state-mapping.md), so a node's operator id
follows from its place in the branch: the last stateful node is 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Column:
    name: str
    type: str                # Spark's simpleString: "string", "bigint", "double"
    expression: str = ""     # value columns: the aggregate expression, whitespace collapsed


@dataclass(frozen=True)
class StateSchema:
    key: tuple[Column, ...]
    value: tuple[Column, ...]


@dataclass(frozen=True)
class StatefulNode:
    name: str
    schema: StateSchema


@dataclass(frozen=True)
class QueryLayout:
    source: str                          # the source node's name
    source_identity: str                 # what it reads (see source_identity)
    stateful: tuple[StatefulNode, ...]   # branch order, upstream first
    sinks: tuple[str, ...] = ()          # its sinks' names (empty in manifests from before they were recorded)

    def operator_ids(self) -> dict[str, int]:
        """Node name -> Spark operator id."""
        last = len(self.stateful) - 1
        return {node.name: last - index for index, node in enumerate(self.stateful)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> QueryLayout:
        def columns(items: list[Mapping[str, Any]]) -> tuple[Column, ...]:
            return tuple(Column(str(c["name"]), str(c["type"]), str(c.get("expression", ""))) for c in items)

        return cls(
            source=str(data["source"]),
            source_identity=str(data["source_identity"]),
            stateful=tuple(
                StatefulNode(str(n["name"]), StateSchema(columns(n["schema"]["key"]), columns(n["schema"]["value"])))
                for n in data["stateful"]
            ),
            sinks=tuple(str(name) for name in data.get("sinks", ())),
        )
