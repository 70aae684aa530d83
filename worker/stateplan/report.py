"""A restore plan for people: a node table, a query table, and the verdict.
``sparkpoint plan`` prints it (coloured on a terminal); a worker logs the
same as text at restore (``render_plan``)."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text

from sparkpoint.tables import table, to_text
from worker.stateplan.plan import Action, NodeDecision, RestorePlan

ACTION_STYLES = {Action.KEEP: "green", Action.FRESH: "cyan", Action.DROP: "yellow", Action.REFUSE: "bold red"}


def _state_cell(decision: NodeDecision) -> str:
    if decision.old is not None and decision.new is not None and decision.old != decision.new:
        return f"{decision.old} -> {decision.new}"
    return str(decision.old or decision.new or "")


def plan_view(plan: RestorePlan) -> RenderableType:
    parts: list[RenderableType] = [table(
        ("NODE", "ACTION", "STATE", "DETAIL"),
        [(d.node, Text(d.action.value, style=ACTION_STYLES[d.action]), _state_cell(d), d.reason)
         for d in plan.nodes])]
    if plan.queries:
        parts += ["", table(("QUERY", "RESTORE"), [(q.name, q.reason) for q in plan.queries])]
    parts += [""] + [Text(f"warning: {warning}", style="yellow") for warning in plan.warnings]
    if plan.refused:
        parts += [Text("Restore refused:", style="bold red")] + [f"  - {refusal}" for refusal in plan.refusals()]
    else:
        counts = plan.counts()
        parts.append(Text(f"Restore would go ahead: {counts[Action.KEEP]} kept, {counts[Action.FRESH]} fresh, "
                          f"{counts[Action.DROP]} dropped.", style="green"))
    return Group(*parts)


def render_plan(plan: RestorePlan) -> str:
    return to_text(plan_view(plan))
