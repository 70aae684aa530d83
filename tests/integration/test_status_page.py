"""The status page in a real browser: Debian's chromium, driven by Selenium
through Debian's chromedriver (``make chromium``), against a real controller
process fed over gRPC by two workers' real clients (no Spark). The page
loads, shows the workers as they register, the graph, their sinks and a
savepoint, and follows a worker's state, all without a reload; a screenshot is saved under
test-artifacts/."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from sparkpoint.devstack import LocalStack, StackConfig, free_port
from sparkpoint.messages import (
    CheckpointInfo,
    PipelineNode,
    ProgressReport,
    QueryCut,
    QueryProgress,
    Recovery,
    SinkContract,
    SinkProgress,
    SinkState,
    StandbyState,
    WorkerState,
)
from sparkpoint.secrets import Secret
from tests.support import get_json, post_json, wait_until
from worker.control.client import ControllerClient, WorkerIdentity

pytestmark = pytest.mark.integration

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
NODES = (PipelineNode("trades", "source.log"), PipelineNode("enrich", "map", inputs=("trades",)),
         PipelineNode("enriched_out", "sink.postgres", inputs=("enrich",)),
         PipelineNode("vwap_state", "aggregate", True, ("trades",)),
         PipelineNode("vwap_out", "sink.files", inputs=("vwap_state",)),
         PipelineNode("history", "source.log"), PipelineNode("history_out", "sink.files", inputs=("history",)))
QUERIES = ("enriched_out", "vwap_out", "history_out")


class FeedingWorker:
    """A worker as the controller sees it, through the worker's own gRPC client:
    it registers, then reports progress (and commits a checkpoint every few
    reports) from a thread until stopped; ``state`` and ``sink_error`` may be
    changed meanwhile."""

    def __init__(self, address: str, index: int, token: Secret | None) -> None:
        identity = WorkerIdentity(f"worker-{index}", index, 2, "3f9c2a71e0b4d5c6", tuple(n.name for n in NODES),
                                  NODES)
        self.client = ControllerClient(address, identity, timeout_s=5, token=token)
        self.index = index
        self.state = WorkerState.RUNNING
        self.sink_error = ""
        self.waiting_for = ""
        self.waiting_since = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.client.register_once()
        self._thread.start()

    def _report(self, seq: int) -> None:
        batch = 40 + seq
        offsets = {str(p): 2000 * batch for p in range(self.index, 4, 2)}
        latest = {p: o + 3000 * (1 + self.index) for p, o in offsets.items()}
        if self.index == 1:     # it reads a Kafka topic's partitions 1 and 3 too
            offsets |= {"trades:1": 100 * batch, "trades:3": 100 * batch}
            latest |= {"trades:1": 100 * batch + 250, "trades:3": 100 * batch + 1400}
        rate = 180 + 60 * ((seq // 4 + self.index) % 3)
        queries = tuple(QueryProgress(name, batch, offsets, rows_processed=150 * seq, rows_per_second=rate,
                                      latest_offsets=latest, active=name != "history_out",
                                      late_rows={"vwap_state": 7} if name == "vwap_out" else {})
                        for name in QUERIES)
        waiting = bool(self.sink_error)
        sinks = (SinkProgress("enriched_out", "PostgreSQL table trades_enriched (transactional)",
                              SinkContract.TRANSACTIONAL, SinkState.WAITING if waiting else SinkState.OK,
                              self.sink_error, waiting_since=self.waiting_since, next_retry_at=time.time() + 4,
                              published_checkpoint_id=seq // 4, published_batch_id=batch - 3,
                              pending_batches=3, retries=2 if waiting else 0),
                 SinkProgress("vwap_out", "files vwap (transactional)", SinkContract.TRANSACTIONAL,
                              published_checkpoint_id=seq // 4, published_batch_id=batch - 2, pending_batches=2))
        recovering = self.state is WorkerState.RECOVERING
        self.client.report(ProgressReport(
            seq=seq, state=self.state, queries=queries, sinks=sinks, restored_checkpoint_id=3 if recovering else 0,
            recovery=Recovery(True, 80_000, 30_000, started_at=time.time()) if recovering else Recovery(),
            finished_nodes=("history", "history_out"), waiting_for=self.waiting_for))
        if seq % 4 == 0:
            self.client.commit_checkpoint(CheckpointInfo(
                seq // 4, (QueryCut("vwap_out", batch, offsets),), size_bytes=180_000 + 1000 * seq,
                duration_ms=120.0 + 90 * ((seq // 4 + self.index) % 4), created_at=time.time(), bytes_copied=12_000))

    def _run(self) -> None:
        seq = 0
        while not self._stop.wait(0.25):       # the workload's pace, not synchronisation
            seq += 1
            self._report(seq)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.client.close()


@pytest.fixture
def controller(tmp_path) -> Iterator[str]:
    stack = LocalStack(StackConfig(root=tmp_path, workers=2, grpc_port=free_port(), http_port=free_port()))
    stack.start_controller()
    base = f"http://127.0.0.1:{stack.config.http_port}"
    try:
        wait_until(lambda: get_json(f"{base}/health")["status"] == "ok", timeout_s=60, what="the controller")
        yield base, f"127.0.0.1:{stack.config.grpc_port}", stack.config.api_token, stack.config.grpc_token
    finally:
        stack.stop_all()


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    """Headless chromium from Debian (no browser download: ``make chromium``)."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, "chromium and chromedriver are missing: run `make chromium`"
    options = Options()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1360,1700",
                     "--force-device-scale-factor=1"):
        options.add_argument(argument)
    with webdriver.Chrome(options=options, service=Service(executable_path=driver)) as chrome:
        yield chrome


def text(browser, selector: str) -> str:
    return browser.find_element(By.CSS_SELECTOR, selector).text


def test_the_page_shows_the_pipeline_and_follows_a_workers_state(controller, browser):
    base, grpc_address, token, grpc_token = controller
    # The page redraws its tables on every poll: an element found just before
    # a redraw is stale by the time it is read, and the next poll finds anew.
    wait = WebDriverWait(browser, 30, ignored_exceptions=(StaleElementReferenceException,))
    # Without the token the page loads (it holds no data) and asks for it.
    browser.get(base + "/")
    wait.until(lambda b: "needs its API token" in text(b, "#offline"))
    assert text(browser, "#pipeline-state") == "connecting…"
    field = browser.find_element(By.ID, "token-input")
    field.send_keys("not-the-token")
    field.submit()
    wait.until(lambda b: "refused that token" in text(b, "#offline"))
    # The right one: kept for the tab (session storage), never in the address.
    field = browser.find_element(By.ID, "token-input")
    field.send_keys(token)
    field.submit()
    wait.until(lambda b: not b.find_element(By.ID, "token-form").is_displayed())
    assert browser.current_url == base + "/" and token not in browser.current_url
    # Before any worker: the page says so.
    wait.until(lambda b: text(b, "#workers tbody") == "No worker has registered yet.")
    assert text(browser, "#pipeline-state") == "starting" and text(browser, "#fact-workers") == "0 / 2"
    assert text(browser, "#fact-standbys") == "0"
    marker = browser.execute_script("return window.__loaded = 'the same page';")
    workers = [FeedingWorker(grpc_address, index, grpc_token) for index in (0, 1)]
    for worker in workers:
        worker.start()
    try:
        savepoint = post_json(f"{base}/savepoints", {"label": "before v2"}, token)
        # The workers appear, running; the graph with its stateful and finished nodes.
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#workers tr[data-state=running]")) == 2)
        assert browser.title == "Sparkpoint"
        assert text(browser, "#pipeline-state") == "running"
        assert text(browser, "#fact-workers") == "2 / 2"
        # A standby says it waits: the header counts it.
        standby = ControllerClient(grpc_address, WorkerIdentity("worker-0", 0, 2, "3f9c2a71e0b4d5c6", (),
                                                                host="c0ffee", pid=7), timeout_s=5, token=grpc_token)
        standby.stand_by(StandbyState.READY, time.time())
        standby.close()
        wait.until(lambda b: text(b, "#fact-standbys") == "1 · 1 ready")
        # Input lag: bytes of the log; records of Kafka, each partition's consumer lag beneath.
        assert text(browser, "#workers tr[data-worker=worker-0] td.lag") == "5.9 KiB"
        assert text(browser, "#workers tr[data-worker=worker-1] td.lag").split("\n") == \
            ["11.7 KiB · 1,650 records", "trades:1 250", "trades:3 1,400"]
        assert text(browser, "#fact-lag") == "17.6 KiB · 1,650 records"
        nodes = {n.get_attribute("data-node"): n.get_attribute("class")
                 for n in browser.find_elements(By.CSS_SELECTOR, "#graph g.node")}
        assert list(nodes) == [n.name for n in NODES]
        assert nodes["vwap_state"] == "node stateful" and nodes["history"] == "node finished"
        assert nodes["enrich"] == "node"
        # Late rows: each node's, over every worker's queries.
        assert text(browser, "#graph g[data-node=vwap_state] .badge") == "STATE · 14 late"
        assert text(browser, "#graph g[data-node=history] .badge") == "FINISHED ✓"
        assert text(browser, '#sinks tr[data-sink="worker-0/vwap_out"]').startswith("worker-0 vwap_out")
        assert text(browser, f'#savepoints tr[data-savepoint="{savepoint["id"]}"]').startswith(
            f"{savepoint['id']} before v2")

        # A worker's state changes: the page follows, still without a reload.
        workers[1].state = WorkerState.RECOVERING
        workers[0].waiting_since = time.time()
        workers[0].sink_error = "OperationalError: connection refused"
        workers[0].waiting_for = "Kafka topic 'trades' does not exist"
        wait.until(lambda b: b.find_element(By.CSS_SELECTOR, "#workers tr[data-worker=worker-1]")
                   .get_attribute("data-state") == "recovering")
        assert text(browser, "#workers tr[data-worker=worker-1] td.state") == "recovering"
        assert "37.5 %" in text(browser, "#workers tr[data-worker=worker-1] td.recovery")
        wait.until(lambda b: "connection refused" in text(b, '#sinks tr[data-sink="worker-0/enriched_out"]'))
        wait.until(lambda b: text(b, "#workers tr[data-worker=worker-0] .waiting") ==
                   "waiting for Kafka topic 'trades' does not exist")
        assert text(browser, "#pipeline-state") == "recovering"
        assert browser.execute_script("return window.__loaded;") == marker

        # The charts fill from /history as the controller samples (every 2 s).
        wait.until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "#chart-rate polyline")) == 2 and
                   len(b.find_elements(By.CSS_SELECTOR, "#chart-checkpoints circle")) >= 4)
        ARTIFACTS.mkdir(exist_ok=True)
        chrome = browser.execute_script("return window.outerHeight - window.innerHeight;")
        browser.set_window_size(1360, browser.execute_script("return document.body.scrollHeight;") + chrome)
        assert browser.save_screenshot(str(ARTIFACTS / "status-page.png"))
    finally:
        for worker in workers:
            worker.stop()

