"""docs/grafana-dashboard.json queries only series the controller exposes."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.unit.rest_support import client_for
from tests.unit.test_metrics import run_a_while

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"


def expressions(panels: list[dict]) -> list[str]:
    found = []
    for panel in panels:
        found += [target["expr"] for target in panel.get("targets") or []]
        found += expressions(panel.get("panels", []))
    return found


def test_every_query_names_series_of_the_exposition(service, clock):
    run_a_while(service, clock)
    with client_for(service) as client:
        exposed = {sample.name for family in text_string_to_metric_families(client.get("/metrics").text)
                   for sample in family.samples}
    dashboard = json.loads(DASHBOARD.read_text())
    queried = {name for expr in expressions(dashboard["panels"]) for name in re.findall(r"sparkpoint_\w+", expr)}
    assert queried and queried <= exposed, f"not exposed: {sorted(queried - exposed)}"
    # The dashboard covers each subject: pipeline, workers, checkpoints, recoveries, sinks.
    for part in ("pipeline_", "worker_rows", "checkpoint_duration", "recover", "sink_"):
        assert any(part in name for name in queried), part
