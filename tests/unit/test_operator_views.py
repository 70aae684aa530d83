"""The JSON the status page and the CLI read beyond /status: the pipeline
graph, the recent history, a worker's durable checkpoints; and what the
controller's own checkpoint keeps of them."""

from __future__ import annotations

import json

import pytest

from controller.progress.observations import HISTORY_WINDOW_S, SAMPLE_INTERVAL_S
from sparkpoint.messages import (
    CheckpointInfo,
    PipelineNode,
    ProgressReport,
    QueryCut,
    QueryProgress,
    Recovery,
    Registration,
    WorkerState,
)
from tests.unit.fakes import new_service
from tests.unit.rest_support import client_for
from tests.unit.savepoint_support import take

NODES = (PipelineNode("trades", "source.log"), PipelineNode("vwap", "aggregate", True, ("trades",)),
         PipelineNode("vwap_out", "sink.files", inputs=("vwap",)),
         PipelineNode("backfill", "source.log"), PipelineNode("backfill_out", "sink.files", inputs=("backfill",)))


@pytest.fixture
def rest(service):
    with client_for(service) as client:
        yield client


class Worker:
    def __init__(self, service, index: int, held=(), nodes=NODES) -> None:
        self.service, self.id, self.seq = service, f"w{index}", 0
        known = service.worker(self.id)         # the same process registering again
        self.session = service.register(Registration(self.id, index, 2, "fp-1", tuple(n.name for n in nodes),
                                                      tuple(held), nodes, known.session_id if known else "")
                                        ).session_id

    def report(self, **fields) -> None:
        self.seq += 1
        self.service.report_progress(ProgressReport(self.id, self.session, self.seq,
                                                    fields.pop("state", WorkerState.RUNNING), **fields))


def test_the_graph_shows_nodes_by_name_state_and_what_finished(service, rest):
    assert rest.get("/pipeline").json() == {"fingerprint": "", "nodes": []}
    w0, w1 = Worker(service, 0), Worker(service, 1)
    w0.report(finished_nodes=("backfill", "backfill_out"))
    nodes = {n["name"]: n for n in rest.get("/pipeline").json()["nodes"]}
    assert list(nodes) == ["trades", "vwap", "vwap_out", "backfill", "backfill_out"]
    assert nodes["vwap"] == {"name": "vwap", "kind": "aggregate", "stateful": True, "inputs": ["trades"],
                             "finished": False}
    assert not nodes["backfill"]["finished"]            # w1 is still reading it
    w1.report(finished_nodes=("backfill", "backfill_out"))
    nodes = {n["name"]: n for n in rest.get("/pipeline").json()["nodes"]}
    assert [n for n in nodes if nodes[n]["finished"]] == ["backfill", "backfill_out"]
    assert rest.get("/pipeline").json()["fingerprint"] == "fp-1"


def test_a_workers_checkpoints_as_it_reports_them_with_their_pins(pipeline, service, clock, rest):
    take(pipeline)                      # pins w0's checkpoint 5
    w0 = Worker(service, 0, held=[CheckpointInfo(4, created_at=clock.now - 60), CheckpointInfo(5)])
    assert [c["checkpoint"]["checkpoint_id"] for c in rest.get("/workers/w0/checkpoints").json()] == [4, 5]
    cut = QueryCut("vwap_out", 17, {"0": 300})
    w0.report(checkpoints=(CheckpointInfo(5), CheckpointInfo(6, (cut,), size_bytes=2048, duration_ms=75.0,
                                                              created_at=clock.now - 2, bytes_copied=512)))
    w0.report()                         # a report without the list keeps it
    listing = rest.get("/workers/w0/checkpoints").json()
    assert [(c["checkpoint"]["checkpoint_id"], c["complete"], c["pinned_by"]) for c in listing] == [
        (5, True, ["sp-000001"]), (6, False, [])]       # 6 is durable, not acknowledged yet
    assert listing[1]["checkpoint"] == {"checkpoint_id": 6, "batch_ids": {"vwap_out": 17},
                                        "offsets": {"vwap_out": {"0": 300}}, "size_bytes": 2048,
                                        "bytes_copied": 512, "duration_ms": 75.0, "created_at": clock.now - 2,
                                        "age_s": 2.0}
    service.commit_checkpoint("w0", CheckpointInfo(6), w0.session)
    assert rest.get("/workers/w0/checkpoints").json()[1]["complete"]
    missing = rest.get("/workers/nobody/checkpoints")
    assert missing.status_code == 404 and missing.json() == {"error": "no worker 'nobody' has registered"}


def test_history_keeps_the_last_minutes_and_answers_what_came_since(service, clock, rest):
    w0 = Worker(service, 0)
    start = clock.now
    for second in range(0, 700, 1):
        clock.now = start + second
        w0.report(queries=(QueryProgress("vwap_out", second, {"0": second}, rows_per_second=float(second),
                                         latest_offsets={"0": second + 10}),))
    service.commit_checkpoint("w0", CheckpointInfo(1, duration_ms=250.0, size_bytes=99), w0.session)
    history = rest.get("/history").json()
    assert (history["now"], history["window_s"]) == (clock.now, HISTORY_WINDOW_S)
    progress = history["workers"]["w0"]["progress"]
    assert progress[-1] == {"at": start + 698, "rows_per_second": 698.0, "lag_bytes": 10}    # one per 2 s
    assert progress[0]["at"] >= clock.now - HISTORY_WINDOW_S
    assert all(b["at"] - a["at"] >= SAMPLE_INTERVAL_S for a, b in zip(progress, progress[1:]))
    assert history["workers"]["w0"]["checkpoints"] == [{"at": clock.now, "checkpoint_id": 1, "duration_s": 0.25,
                                                       "size_bytes": 99}]
    clock.now += 2
    w0.report(queries=(QueryProgress("vwap_out", 700, rows_per_second=5.0),))
    since = rest.get("/history", params={"since": history["now"]}).json()["workers"]["w0"]
    assert since == {"progress": [{"at": clock.now, "rows_per_second": 5.0, "lag_bytes": 0}], "checkpoints": []}


def test_the_controllers_checkpoint_keeps_graph_checkpoints_and_recoveries(service, clock, tmp_path):
    w0 = Worker(service, 0)
    w0.report(finished_nodes=("backfill",), checkpoints=(CheckpointInfo(2, (QueryCut("q", 1, {"0": 5}),)),),
              recovery=Recovery(False, 10, 10, started_at=clock.now - 5, duration_ms=5000.0))
    restarted = new_service(clock, tmp_path)
    restarted.load_snapshot(json.loads(json.dumps(service.snapshot())))
    record = restarted.worker("w0")
    assert record == service.worker("w0")
    assert (record.nodes, record.finished_nodes, record.recoveries) == (NODES, ("backfill",), 1)
    assert record.checkpoints[0].queries == (QueryCut("q", 1, {"0": 5}),)


def test_the_status_page_and_only_its_own_files_are_served(rest):
    page = rest.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script src="/static/page.js">' in page.text and "https://" not in page.text    # nothing from the web
    for name, kind in (("page.js", "text/javascript"), ("page.css", "text/css"), ("favicon.svg", "image/svg+xml")):
        response = rest.get(f"/static/{name}")
        assert response.status_code == 200 and response.headers["content-type"].startswith(kind)
        assert "https://" not in response.text and "http://" not in response.text.replace("http://www.w3.org", "")
    for name in ("index.html", "..%2Fpage.py", "nothing.js"):
        assert rest.get(f"/static/{name}").status_code == 404
