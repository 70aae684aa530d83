"""The compose stack's monitoring profile: Prometheus, from Debian's package
in an image built like the others, scrapes the controller's /metrics."""

from __future__ import annotations

import subprocess
import urllib.parse

import pytest

from sparkpoint.devstack import free_port
from tests.chaos.compose import REPO
from tests.support import get_json, wait_until

pytestmark = pytest.mark.chaos


@pytest.fixture(scope="session")
def prometheus_image(images) -> None:
    subprocess.run(["make", "monitoring-images"], cwd=REPO, check=True)


def test_prometheus_scrapes_the_controller(prometheus_image, stack):
    port = free_port()
    compose = stack(COMPOSE_PROFILES="monitoring", SP_PROMETHEUS_PUBLISH_PORT=str(port))
    compose.up("controller", "prometheus")          # no workers needed: the controller answers alone
    prometheus = f"http://127.0.0.1:{port}/api/v1"
    [target] = wait_until(lambda: [t for t in get_json(f"{prometheus}/targets")["data"]["activeTargets"]
                                   if t["health"] == "up"], timeout_s=180,
                          what="Prometheus to scrape the controller successfully")
    assert (target["labels"]["job"], target["scrapeUrl"]) == ("sparkpoint", "http://controller:8080/metrics")
    query = urllib.parse.quote("sparkpoint_pipeline_workers_expected")
    [result] = wait_until(lambda: get_json(f"{prometheus}/query?query={query}")["data"]["result"], timeout_s=60,
                          what="the controller's metrics in Prometheus")
    assert result["value"][1] == "1"                # SP_WORKER_COUNT of the compose stack as it ships
