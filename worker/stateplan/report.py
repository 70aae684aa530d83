"""A restore plan as text: a node table, a query table, and the verdict.
Printed by ``sparkpoint plan``; a worker logs the same at restore."""

from __future__ import annotations

from sparkpoint.tables import render_table
from worker.stateplan.plan import Action, NodeDecision, RestorePlan


def _state_cell(decision: NodeDecision) -> str:
    if decision.old is not None and decision.new is not None and decision.old != decision.new:
        return f"{decision.old} -> {decision.new}"
    return str(decision.old or decision.new or "")


def render_plan(plan: RestorePlan) -> str:
    lines = render_table(("NODE", "ACTION", "STATE", "DETAIL"),
                   [(d.node, d.action.value, _state_cell(d), d.reason) for d in plan.nodes])
    if plan.queries:
        lines += [""] + render_table(("QUERY", "RESTORE"), [(q.name, q.reason) for q in plan.queries])
    lines += [""] + [f"warning: {warning}" for warning in plan.warnings]
    if plan.refused:
        lines += ["Restore refused:"] + [f"  - {refusal}" for refusal in plan.refusals()]
    else:
        counts = plan.counts()
        lines.append(f"Restore would go ahead: {counts[Action.KEEP]} kept, {counts[Action.FRESH]} fresh, "
                     f"{counts[Action.DROP]} dropped.")
    return "\n".join(lines)
