"""Helpers shared by the integration tests: polling with a deadline, the
controller's status over HTTP, and batch computations to compare against."""

from __future__ import annotations

import json
import math
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(probe: Callable[[], T | None], *, timeout_s: float, what: str, interval_s: float = 0.5,
               clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what``.

    Any other exception from ``probe`` (a service still starting) is retried
    until the deadline, but an ``AssertionError`` is a verdict, not a state
    to wait out: it fails at once. ``clock`` and ``sleep`` are injected by the
    unit tests."""
    deadline = clock() + timeout_s
    last_error: Exception | None = None
    while clock() < deadline:
        try:
            value = probe()
            if value:
                return value
        except AssertionError:
            raise
        except Exception as error:  # a service still starting: keep polling
            last_error = error
        sleep(interval_s)  # poll interval, not synchronisation: the deadline bounds the wait
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}"
                         + (f" (last error: {last_error})" if last_error else ""))


def alive(stack, name: str = "worker-0") -> bool:
    """True while service ``name`` of ``stack`` runs. One that exited fails
    the test at once (in a probe too: ``wait_until`` lets assertions
    through), naming its exit code and the end of its log: nothing restarts
    a service that exited unexpectedly."""
    service = stack.services[name]
    code = service.process.poll()
    if code is not None:
        raise AssertionError(f"{name} exited unexpectedly with code {code}:\n{log_tail(service)}")
    return True


def killed_by_fault(stack, point: str, index: int = 0) -> bool:
    """Worker ``index`` SIGKILLed itself at fault point ``point``
    (``SP_TEST_FAULT``): its sentinel exists and it died of SIGKILL. False
    while it runs; one that exited any other way fails the test at once."""
    name = f"worker-{index}"
    service = stack.services[name]
    code = service.process.poll()
    if code is None:
        return False
    sentinel = stack.config.checkpoint_dir(index) / f".fault-{point}"
    if code != -signal.SIGKILL or not sentinel.exists():
        raise AssertionError(f"{name} exited with code {code}, not killed at fault point {point} "
                             f"(sentinel {'present' if sentinel.exists() else 'absent'}):\n{log_tail(service)}")
    return True


def log_tail(service, lines: int = 40) -> str:
    try:
        text = service.log_path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        text = ["<no log>"]
    return f"--- {service.name} ({service.log_path}) ---\n" + "\n".join(text)


def body_failed(request) -> bool:
    """In a fixture's teardown: did the test body fail? (``tests/conftest.py``'s
    report hook records each phase's report on the test item.)"""
    report = getattr(request.node, "rep_call", None)
    return report is not None and report.failed


def bearer(token: str | None) -> dict[str, str]:
    """The header that carries the controller's REST token (none without one)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def scrape(stack) -> dict[str, dict]:
    """The stack's controller's ``/metrics``: each family's type and samples
    ((sample name, sorted labels) -> value), parsed by prometheus_client."""
    from prometheus_client.parser import text_string_to_metric_families

    url = f"http://localhost:{stack.config.http_port}/metrics"
    request = urllib.request.Request(url, headers=bearer(stack.config.api_token))
    with urllib.request.urlopen(request, timeout=5) as response:
        text = response.read().decode()
    return {f.name: {"type": f.type, "samples": {(s.name, tuple(sorted(s.labels.items()))): s.value
                                                 for s in f.samples}} for f in text_string_to_metric_families(text)}


def metric_samples(stack, family: str) -> list[tuple[dict[str, str], float]]:
    """One family's samples from the stack's ``/metrics``: (labels, value)."""
    return [(dict(labels), value) for (_, labels), value in scrape(stack)[family]["samples"].items()]


def get_json(url: str, token: str | None = None, timeout_s: float = 5) -> dict:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=bearer(token)), timeout=timeout_s) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:
        return {"http_status": error.code, **json.load(error)}


def post_json(url: str, body: dict, token: str | None = None) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **bearer(token)})
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.load(response)


def worker_status(stack, index: int = 0) -> dict | None:
    """Worker ``index`` as the stack's controller shows it (None until it registered)."""
    status = get_json(stack.config.status_url, stack.config.api_token)
    return next((w for w in status.get("workers", []) if w["worker_index"] == index), None)


def caught_up(stack, log, queries: set[str], index: int = 0, state: str = "running",
              workers: int = 1) -> dict | None:
    """Worker ``index`` of ``workers``, once it is in ``state`` and each of
    ``queries`` has read its partitions of ``log`` to their end."""
    from sparkpoint.eventlog import committed_end

    ends = {str(p): committed_end(log.path(p), 0) for p in range(log.partitions()) if p % workers == index}
    worker = worker_status(stack, index)
    if worker is None or set(worker["offsets"]) != queries or worker["state"] != state:
        return None
    return worker if all(offsets == ends for offsets in worker["offsets"].values()) else None


def new_run_processed(worker: dict | None, before: dict) -> bool:
    """``worker`` (a status entry) is a run registered after ``before`` that
    has committed a batch with rows. Registering resets the state to
    "starting", so running/recovering comes from the new run's own report;
    a restored run reports its restored batch until it commits a new one, and
    counts rows from 0."""
    return (worker is not None and worker["registrations"] > before["registrations"]
            and worker["state"] in ("running", "recovering") and worker["rows_processed"] > 0)


def all_published(status: dict) -> bool:
    """Every worker's every staged sink has published its query's latest
    batch, and there is one (transactional sinks publish one checkpoint
    interval after it). A sink's query is in its status (transactional
    sinks of one stem share one)."""
    workers = status.get("workers", [])
    for worker in workers:
        batches = {q["name"]: q["batch_id"] for q in worker["queries"]}
        if not worker["sinks"] or any(s["published_batch_id"] < 0 or s["pending_batches"] or
                                      s["published_batch_id"] != batches.get(s["query"]) for s in worker["sinks"]):
            return False
    return bool(workers)


# pipelines/symbols.sql's reference table: each producer symbol's sector.
SECTORS = {"AAPL": "Technology", "MSFT": "Technology", "GOOG": "Communication", "AMZN": "Consumer",
           "NVDA": "Technology", "META": "Communication", "TSLA": "Consumer", "IBM": "Technology"}


def expected_vwap(events: list[dict]) -> dict[str, dict[str, float]]:
    """The per-symbol aggregates, computed in one batch over the whole input."""
    result: dict[str, dict[str, float]] = {}
    for event in events:
        row = result.setdefault(event["sym"], {"notional": 0.0, "volume": 0, "trades": 0})
        row["notional"] += event["price"] * event["size"]
        row["volume"] += event["size"]
        row["trades"] += 1
    for row in result.values():
        row["vwap"] = row["notional"] / row["volume"]
    return result


def vwap_differences(rows: list[dict], expected: dict[str, dict[str, float]]) -> list[str]:
    """Where the per-symbol rows of a vwap table differ from ``expected``
    (``expected_vwap``): trade counts and volumes exactly, notionals within
    rounding; empty when they agree."""
    found = {row["sym"]: row for row in rows}
    differences = [f"{sym}: missing" for sym in sorted(expected.keys() - found.keys())]
    differences += [f"{sym}: never produced" for sym in sorted(found.keys() - expected.keys())]
    for sym in sorted(expected.keys() & found.keys()):
        row, want = found[sym], expected[sym]
        differences += [f"{sym}: {column} {row[column]} != {want[column]}" for column in ("trades", "volume")
                        if row[column] != want[column]]
        if not math.isclose(row["notional"], want["notional"], rel_tol=1e-9):
            differences.append(f"{sym}: notional {row['notional']} != {want['notional']}")
    return differences


def log_tails(stack, lines: int = 40) -> str:
    """The end of every service's log, for failure messages."""
    return "\n".join(log_tail(service, lines) for service in stack.services.values())
