"""Joins of a stream with a reference table (``sp.read.table_from_postgres``
declares one, ``sp.join`` joins it): Spark's stream-static join, the table
read again at every micro-batch (``worker.sources.tables``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from worker.api.graph import Node, Operator, PipelineError

TABLE_PATTERN = re.compile(r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$")
HOWS = ("left", "inner")


@dataclass(frozen=True)
class Table:
    """A reference table: not a stream, so nothing reads it on its own; ``sp.join`` joins a stream with it."""

    table: str      # [schema.]name in PostgreSQL
    schema: str     # Spark DDL of the columns read


def table_from_postgres(table: str, *, schema: str) -> Table:
    """The PostgreSQL table ``table`` (connection: ``SP_PG_*``), its columns
    in ``schema`` (a Spark DDL string), to join a stream with (``sp.join``).
    It is read again at every micro-batch: a row changed in the table is seen
    from the next batch on (a batch replayed after a crash sees the table as
    it is then)."""
    if not isinstance(table, str) or not TABLE_PATTERN.match(table):
        raise PipelineError(f"table_from_postgres({table!r}): a table name is lower-case letters, digits and '_', "
                            "optionally after a schema name and a dot")
    if not isinstance(schema, str) or not schema.strip():
        raise PipelineError(f"table_from_postgres({table!r}): schema is the Spark DDL of the columns to read, "
                            "e.g. 'sym string, sector string'")
    return Table(table, schema)


def join(table: Table, *, on: str | list[str], how: str = "left", name: str | None = None) -> Operator:
    """Join each row of the stream with the reference ``table``'s rows of
    equal ``on`` columns: ``how="left"`` keeps rows without a match (the
    table's columns null), ``"inner"`` drops them. Stateless: the table is
    read again at every micro-batch (``sp.read.table_from_postgres``)."""
    keys = [on] if isinstance(on, str) else list(on)
    if not isinstance(table, Table):
        raise PipelineError(f"sp.join() joins a reference table (sp.read.table_from_postgres(...)), "
                            f"got {type(table).__name__}")
    if not keys or not all(isinstance(key, str) and key for key in keys):
        raise PipelineError(f"sp.join({table.table!r}): on is the column(s) to join on, got {on!r}")
    if how not in HOWS:
        raise PipelineError(f"sp.join({table.table!r}): how is 'left' (keep rows without a match) or 'inner', "
                            f"got {how!r}")
    return Operator(Node("join_table", {"table": table.table, "schema": table.schema, "on": keys, "how": how},
                         name))
