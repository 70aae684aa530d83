"""``GET /metrics``: the exposition parsed with prometheus_client's own parser
has every family, named by Prometheus' conventions, with the values the
controller's state holds at scrape time."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from sparkpoint.messages import (
    CheckpointInfo,
    PipelineNode,
    ProgressReport,
    QueryProgress,
    Recovery,
    Registration,
    Restarts,
    SinkContract,
    SinkProgress,
    SinkState,
    StandbyReport,
    StandbyState,
    VolumeUse,
    WorkerState,
)
from tests.unit.rest_support import client_for
from tests.unit.savepoint_support import take

NODES = (PipelineNode("trades", "source.log"), PipelineNode("vwap", "aggregate", True, ("trades",)),
         PipelineNode("vwap_out", "sink.files", inputs=("vwap",)))

# Every family and its type: the specification this test holds the exposition to.
FAMILIES = {
    "sparkpoint_pipeline_state": "gauge",
    "sparkpoint_pipeline_workers_expected": "gauge",
    "sparkpoint_pipeline_workers_registered": "gauge",
    "sparkpoint_pipeline_rows_per_second": "gauge",
    "sparkpoint_pipeline_input_lag_bytes": "gauge",
    "sparkpoint_pipeline_node_finished": "gauge",
    "sparkpoint_standbys": "gauge",
    "sparkpoint_savepoints": "gauge",
    "sparkpoint_worker_state": "gauge",
    "sparkpoint_worker_last_report_age_seconds": "gauge",
    "sparkpoint_worker_registrations": "counter",
    "sparkpoint_worker_batch_id": "gauge",
    "sparkpoint_worker_rows_processed": "counter",
    "sparkpoint_worker_rows_per_second": "gauge",
    "sparkpoint_worker_input_lag_bytes": "gauge",
    "sparkpoint_worker_waiting_for_sources": "gauge",
    "sparkpoint_worker_checkpoint_id": "gauge",
    "sparkpoint_worker_checkpoint_age_seconds": "gauge",
    "sparkpoint_worker_checkpoint_size_bytes": "gauge",
    "sparkpoint_worker_checkpoint_copied_bytes": "gauge",
    "sparkpoint_worker_checkpoint_duration_seconds": "histogram",
    "sparkpoint_worker_checkpoints_completed": "counter",
    "sparkpoint_worker_checkpoints_dropped": "counter",
    "sparkpoint_worker_checkpoints_failed": "counter",
    "sparkpoint_worker_checkpoints_durable": "gauge",
    "sparkpoint_worker_checkpoint_volume_used_bytes": "gauge",
    "sparkpoint_worker_checkpoint_volume_free_bytes": "gauge",
    "sparkpoint_worker_restored_checkpoint_id": "gauge",
    "sparkpoint_worker_recovering": "gauge",
    "sparkpoint_worker_recovery_remaining_bytes": "gauge",
    "sparkpoint_worker_recoveries": "counter",
    "sparkpoint_worker_recovery_duration_seconds": "histogram",
    "sparkpoint_worker_restarts": "counter",
    "sparkpoint_query_batches": "counter",
    "sparkpoint_query_rows_processed": "counter",
    "sparkpoint_query_rows_per_second": "gauge",
    "sparkpoint_query_input_lag_bytes": "gauge",
    "sparkpoint_query_active": "gauge",
    "sparkpoint_query_kafka_lag_records": "gauge",
    "sparkpoint_query_source_data_losses": "counter",
    "sparkpoint_node_late_rows": "counter",
    "sparkpoint_sink_info": "gauge",
    "sparkpoint_sink_published_batch_id": "gauge",
    "sparkpoint_sink_published_checkpoint_id": "gauge",
    "sparkpoint_sink_pending_batches": "gauge",
    "sparkpoint_sink_publish_lag_batches": "gauge",
    "sparkpoint_sink_waiting": "gauge",
    "sparkpoint_sink_waiting_seconds": "gauge",
    "sparkpoint_sink_publish_retries": "counter",
}


def scrape(client: TestClient) -> dict[str, dict]:
    """family name -> {"type", "samples": {(sample name, sorted labels): value}}."""
    response = client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return {family.name: {"type": family.type, "samples": {
        (s.name, tuple(sorted(s.labels.items()))): s.value for s in family.samples}}
        for family in text_string_to_metric_families(response.text)}


def value(families: dict, family: str, sample: str | None = None, **labels: str) -> float:
    return families[family]["samples"][(sample or family, tuple(sorted(labels.items())))]


@pytest.fixture
def rest(service):
    with client_for(service) as client:
        yield client


def run_a_while(service, clock) -> None:
    """Worker w0 restored checkpoint 3, caught up in 12.5 s and runs, its
    sink waiting; w1 is still starting. Two checkpoints of w0 completed."""
    w0 = service.register(Registration("w0", 0, 2, "fp-1", tuple(n.name for n in NODES),
                                       (CheckpointInfo(3, duration_ms=900.0),), NODES))
    w1 = service.register(Registration("w1", 1, 2, "fp-1", tuple(n.name for n in NODES), (), NODES))
    service.report_progress(ProgressReport("w1", w1.session_id, 1, waiting_for="Kafka topic 'trades' does not exist"))
    service.stand_by(StandbyReport("w0", "c0ffee", 7, StandbyState.READY))
    # Reading a log's partitions 0 and 2 and a Kafka topic's (whose partition 4 is new).
    query = QueryProgress("vwap_out", batch_id=41, offsets={"0": 1000, "2": 400, "trades:0": 70, "trades:2": 10},
                          rows_processed=250, rows_per_second=48.5, data_losses=2, late_rows={"vwap": 9},
                          latest_offsets={"0": 1600, "2": 500, "trades:0": 100, "trades:2": 10, "trades:4": 5})
    sink = SinkProgress("vwap_out", "files vwap (transactional)", SinkContract.TRANSACTIONAL, SinkState.WAITING,
                        "OSError: disk full", waiting_since=clock.now - 30, next_retry_at=clock.now + 2,
                        published_checkpoint_id=4, published_batch_id=38, pending_batches=3, retries=7)
    report = ProgressReport("w0", w0.session_id, 1, WorkerState.RECOVERING, (query,), restored_checkpoint_id=3,
                            recovery=Recovery(True, 5000, 1000, started_at=clock.now - 10), sinks=(sink,),
                            dropped_checkpoints=2, failed_checkpoints=1)
    service.report_progress(report)
    service.commit_checkpoint("w0", CheckpointInfo(4, size_bytes=4096, duration_ms=180.0, created_at=clock.now - 4,
                                                   bytes_copied=1024), w0.session_id)
    clock.now += 3
    service.report_progress(ProgressReport(
        "w0", w0.session_id, 2, WorkerState.RUNNING, (query,), restored_checkpoint_id=3,
        recovery=Recovery(False, 5000, 5000, started_at=clock.now - 13, duration_ms=12_500.0), sinks=(sink,),
        dropped_checkpoints=2, failed_checkpoints=1, checkpoint_volume=VolumeUse(7 << 30, 3 << 30),
        restarts=Restarts(2, 1, "ValueError: bad row", clock.now - 20),
        checkpoints=(CheckpointInfo(3, duration_ms=900.0), CheckpointInfo(4, duration_ms=180.0),
                     CheckpointInfo(5, duration_ms=2600.0, created_at=clock.now))))
    service.commit_checkpoint("w0", CheckpointInfo(5, size_bytes=5000, duration_ms=2600.0, created_at=clock.now - 1,
                                                   bytes_copied=904), w0.session_id)


def test_every_family_is_exposed_with_its_type(service, clock, rest):
    run_a_while(service, clock)
    families = scrape(rest)
    assert {name: family["type"] for name, family in families.items()} == FAMILIES


def test_values_are_the_controllers_state_at_scrape_time(service, clock, rest):
    run_a_while(service, clock)
    clock.now += 2
    m = scrape(rest)
    # pipeline-wide
    assert value(m, "sparkpoint_pipeline_state", state="starting") == 1.0          # w1 is still starting
    assert value(m, "sparkpoint_pipeline_state", state="running") == 0.0
    assert (value(m, "sparkpoint_pipeline_workers_expected"), value(m, "sparkpoint_pipeline_workers_registered")) \
        == (2, 2)
    assert value(m, "sparkpoint_pipeline_rows_per_second") == 48.5
    assert value(m, "sparkpoint_pipeline_input_lag_bytes") == 600 + 100
    assert value(m, "sparkpoint_pipeline_node_finished", node="vwap", kind="aggregate", stateful="true") == 0.0
    assert [value(m, "sparkpoint_standbys", state=s) for s in ("starting", "ready")] == [0, 1]
    # per worker
    assert value(m, "sparkpoint_worker_state", worker="w0", state="running") == 1.0
    assert value(m, "sparkpoint_worker_state", worker="w1", state="starting") == 1.0
    assert value(m, "sparkpoint_worker_last_report_age_seconds", worker="w0") == 2.0
    assert value(m, "sparkpoint_worker_rows_processed", "sparkpoint_worker_rows_processed_total", worker="w0") == 250
    assert value(m, "sparkpoint_worker_input_lag_bytes", worker="w0") == 700
    assert value(m, "sparkpoint_worker_batch_id", worker="w0") == 41
    assert value(m, "sparkpoint_worker_checkpoint_id", worker="w0") == 5
    assert value(m, "sparkpoint_worker_checkpoint_age_seconds", worker="w0") == 3.0
    assert value(m, "sparkpoint_worker_checkpoint_size_bytes", worker="w0") == 5000
    assert value(m, "sparkpoint_worker_checkpoint_copied_bytes", worker="w0") == 904
    assert value(m, "sparkpoint_worker_checkpoints_completed", "sparkpoint_worker_checkpoints_completed_total",
                 worker="w0") == 2
    assert value(m, "sparkpoint_worker_checkpoints_dropped", "sparkpoint_worker_checkpoints_dropped_total",
                 worker="w0") == 2
    assert value(m, "sparkpoint_worker_checkpoints_failed", "sparkpoint_worker_checkpoints_failed_total",
                 worker="w0") == 1
    assert value(m, "sparkpoint_worker_checkpoints_durable", worker="w0") == 3
    assert value(m, "sparkpoint_worker_checkpoint_volume_used_bytes", worker="w0") == 7 << 30
    assert value(m, "sparkpoint_worker_checkpoint_volume_free_bytes", worker="w0") == 3 << 30
    assert ("sparkpoint_worker_checkpoint_volume_free_bytes", (("worker", "w1"),)) \
        not in m["sparkpoint_worker_checkpoint_volume_free_bytes"]["samples"]      # w1 has not reported it yet
    assert value(m, "sparkpoint_worker_restored_checkpoint_id", worker="w0") == 3
    assert value(m, "sparkpoint_worker_recovering", worker="w0") == 0
    assert value(m, "sparkpoint_worker_recoveries", "sparkpoint_worker_recoveries_total", worker="w0") == 1
    assert value(m, "sparkpoint_worker_restarts", "sparkpoint_worker_restarts_total", worker="w0") == 2
    assert value(m, "sparkpoint_worker_restarts", "sparkpoint_worker_restarts_total", worker="w1") == 0
    assert value(m, "sparkpoint_worker_waiting_for_sources", worker="w1") == 1
    assert value(m, "sparkpoint_worker_waiting_for_sources", worker="w0") == 0
    # Checkpoints 4 and 5 observed once each (a commit and a report name them);
    # 3 was on the volume before: never observed.
    durations = "sparkpoint_worker_checkpoint_duration_seconds"
    assert value(m, durations, durations + "_count", worker="w0") == 2
    assert value(m, durations, durations + "_sum", worker="w0") == pytest.approx(2.78)
    assert value(m, durations, durations + "_bucket", worker="w0", le="0.25") == 1
    assert value(m, durations, durations + "_bucket", worker="w0", le="2.5") == 1
    assert value(m, durations, durations + "_bucket", worker="w0", le="5.0") == 2
    assert value(m, durations, durations + "_bucket", worker="w0", le="+Inf") == 2
    assert value(m, durations, durations + "_count", worker="w1") == 0
    recoveries = "sparkpoint_worker_recovery_duration_seconds"
    assert value(m, recoveries, recoveries + "_sum", worker="w0") == 12.5
    assert value(m, recoveries, recoveries + "_bucket", worker="w0", le="10.0") == 0
    assert value(m, recoveries, recoveries + "_bucket", worker="w0", le="30.0") == 1
    # per query
    labels = {"worker": "w0", "query": "vwap_out"}
    assert value(m, "sparkpoint_query_batches", "sparkpoint_query_batches_total", **labels) == 42
    assert value(m, "sparkpoint_query_rows_processed", "sparkpoint_query_rows_processed_total", **labels) == 250
    assert value(m, "sparkpoint_query_rows_per_second", **labels) == 48.5
    assert value(m, "sparkpoint_query_input_lag_bytes", **labels) == 700
    assert value(m, "sparkpoint_query_active", **labels) == 1
    assert value(m, "sparkpoint_query_source_data_losses", "sparkpoint_query_source_data_losses_total", **labels) == 2
    assert [value(m, "sparkpoint_query_kafka_lag_records", topic="trades", partition=p, **labels)
            for p in ("0", "2", "4")] == [30, 0, 5]
    assert value(m, "sparkpoint_node_late_rows", "sparkpoint_node_late_rows_total", node="vwap", **labels) == 9
    # per sink
    labels = {"worker": "w0", "sink": "vwap_out"}
    assert value(m, "sparkpoint_sink_info", target="files vwap (transactional)", contract="transactional",
                 **labels) == 1
    assert value(m, "sparkpoint_sink_published_batch_id", **labels) == 38
    assert value(m, "sparkpoint_sink_published_checkpoint_id", **labels) == 4
    assert value(m, "sparkpoint_sink_pending_batches", **labels) == 3
    assert value(m, "sparkpoint_sink_publish_lag_batches", **labels) == 3
    assert value(m, "sparkpoint_sink_waiting", **labels) == 1
    assert value(m, "sparkpoint_sink_waiting_seconds", **labels) == 35
    assert value(m, "sparkpoint_sink_publish_retries", "sparkpoint_sink_publish_retries_total", **labels) == 7


def test_a_recovery_is_counted_once_across_reports_and_a_re_registration(service, clock, rest):
    run_a_while(service, clock)
    ended = Recovery(False, 5000, 5000, started_at=clock.now - 13, duration_ms=12_500.0)   # the same run's
    w0 = service.register(Registration("w0", 0, 2, "fp-1", (), (),      # the controller lost it, say
                                       session_id=service.worker("w0").session_id))
    service.report_progress(ProgressReport("w0", w0.session_id, 1, WorkerState.RUNNING, recovery=ended))
    m = scrape(rest)
    assert value(m, "sparkpoint_worker_recoveries", "sparkpoint_worker_recoveries_total", worker="w0") == 1
    assert value(m, "sparkpoint_worker_recovery_duration_seconds", "sparkpoint_worker_recovery_duration_seconds_count",
                 worker="w0") == 1


def test_savepoints_and_finished_nodes(pipeline, service, clock, rest):
    take(pipeline)
    service.trigger_savepoint("second")
    m = scrape(rest)
    assert [value(m, "sparkpoint_savepoints", state=s) for s in ("pending", "complete", "failed")] == [1, 1, 0]
    for index in (0, 1):
        w = service.register(Registration(f"w{index}", index, 2, "fp-1", (), (), NODES,
                                          session_id=service.worker(f"w{index}").session_id))
        service.report_progress(ProgressReport(f"w{index}", w.session_id, 1, WorkerState.FINISHED,
                                               finished_nodes=("trades", "vwap") if index == 0 else ("trades",)))
    m = scrape(rest)
    finished = {n: value(m, "sparkpoint_pipeline_node_finished", node=n, kind=k.kind, stateful=str(k.stateful).lower())
                for n, k in ((k.name, k) for k in NODES)}
    assert finished == {"trades": 1, "vwap": 0, "vwap_out": 0}     # vwap: only w0 finished it


def test_a_released_worker_that_registers_again_is_observed_afresh(service, clock, rest):
    run_a_while(service, clock)
    clock.now += 60
    service.release_worker("w0")
    assert "w0" not in rest.get("/history").json()["workers"]
    service.register(Registration("w0", 0, 2, "fp-1", (), ()))
    m = scrape(rest)
    for histogram in ("sparkpoint_worker_checkpoint_duration_seconds", "sparkpoint_worker_recovery_duration_seconds"):
        assert value(m, histogram, histogram + "_count", worker="w0") == 0
