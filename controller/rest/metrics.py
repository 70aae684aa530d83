"""``GET /metrics``: the controller's state in Prometheus' exposition format.

A custom collector reads the controller's state at scrape time
(``ControllerService.readings``) instead of updating metrics on the side:
what is scraped is what ``/status`` says at that moment. Names follow
Prometheus' conventions: ``sparkpoint_`` and the subject (pipeline, worker,
query, sink, savepoints), base units in the name (seconds, bytes), ``_total``
for counters. A state is one series per possible value, 1 for the current
one. Counters a worker keeps per run (rows, dropped or failed checkpoints,
publish retries) start again from 0 when it restarts, which ``rate()``
treats as a counter reset.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from fastapi import APIRouter, Request, Response
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from controller.core.readings import Readings
from controller.core.service import ControllerService
from controller.core.status import SinkView, WorkerStatus
from controller.progress.observations import HistogramView
from controller.savepoints.model import SavepointState
from sparkpoint.messages import QueryProgress, SinkState, StandbyState, VolumeUse, WorkerState
from sparkpoint.offsets import kafka_partition

Samples = Iterable[tuple[list[str], float]]


@dataclass(frozen=True)
class Family:
    """One metric family: its name, help text, labels, and whether it counts."""

    name: str
    documentation: str
    labels: tuple[str, ...] = ()
    counter: bool = False

    def build(self, samples: Samples) -> Metric:
        family_type = CounterMetricFamily if self.counter else GaugeMetricFamily
        family = family_type(self.name, self.documentation, labels=list(self.labels))
        for labels, value in samples:
            family.add_metric(labels, value)
        return family


def _states(values: Iterable[str], current: str) -> list[tuple[str, float]]:
    return [(value, 1.0 if value == current else 0.0) for value in values]


WORKER_STATES = [state.value for state in WorkerState]

# -- pipeline-wide ----------------------------------------------------------------------
PIPELINE_STATE = Family("sparkpoint_pipeline_state", "The pipeline's state: 1 for the current one.", ("state",))
WORKERS_EXPECTED = Family("sparkpoint_pipeline_workers_expected", "Workers the controller expects (SP_WORKER_COUNT).")
WORKERS_REGISTERED = Family("sparkpoint_pipeline_workers_registered", "Workers that have registered.")
PIPELINE_ROWS_PER_SECOND = Family("sparkpoint_pipeline_rows_per_second", "Rows per second, every worker together.")
PIPELINE_LAG = Family("sparkpoint_pipeline_input_lag_bytes",
                      "Input behind the source's end, every worker together (bytes of the log).")
NODES = Family("sparkpoint_pipeline_node_finished", "Each node of the pipeline graph: 1 once every worker has "
               "finished it (its bounded input read to the end).", ("node", "kind", "stateful"))
STANDBYS = Family("sparkpoint_standbys", "Warm standbys the controller heard from in the last 10 s, by state.",
                  ("state",))
SAVEPOINTS = Family("sparkpoint_savepoints", "Savepoints the controller records, by state.", ("state",))

# -- per worker ---------------------------------------------------------------------------
def _volume(worker: WorkerStatus) -> VolumeUse | None:
    """Its checkpoint volume's use; None until it reported one."""
    return worker.checkpoint_volume if worker.checkpoint_volume != VolumeUse() else None


W = ("worker",)
WORKER_FAMILIES: list[tuple[Family, Callable[[WorkerStatus], float | None]]] = [
    (Family("sparkpoint_worker_last_report_age_seconds", "Seconds since the worker's last progress report.", W),
     lambda w: w.heartbeat_age_s),
    (Family("sparkpoint_worker_registrations_total", "Times the worker registered (starts, restarts, and after a "
            "controller restart).", W, counter=True), lambda w: w.registrations),
    (Family("sparkpoint_worker_batch_id", "The last batch its slowest query committed.", W), lambda w: w.batch_id),
    (Family("sparkpoint_worker_rows_processed_total", "Rows the worker processed in this run (its slowest query's).",
            W, counter=True), lambda w: w.rows_processed),
    (Family("sparkpoint_worker_rows_per_second", "Rows per second (its slowest query's).", W),
     lambda w: w.rows_per_second),
    (Family("sparkpoint_worker_input_lag_bytes", "Input behind the source's end as of the last batch (its slowest "
            "query's; bytes of the log).", W), lambda w: w.lag_bytes),
    (Family("sparkpoint_worker_waiting_for_sources", "1 while the worker waits for a source before running its "
            "queries (a log or Kafka topic missing, Kafka unreachable: /status says which).", W),
     lambda w: 1.0 if w.waiting_for else 0.0),
    (Family("sparkpoint_worker_checkpoint_id", "The worker's newest complete checkpoint (0: none).", W),
     lambda w: w.last_checkpoint.checkpoint_id if w.last_checkpoint else 0),
    (Family("sparkpoint_worker_checkpoint_age_seconds", "Seconds since the newest complete checkpoint was taken.", W),
     lambda w: w.last_checkpoint.age_s if w.last_checkpoint else None),
    (Family("sparkpoint_worker_checkpoint_size_bytes", "Everything the newest complete checkpoint references.", W),
     lambda w: w.last_checkpoint.size_bytes if w.last_checkpoint else None),
    (Family("sparkpoint_worker_checkpoint_copied_bytes", "What the newest complete checkpoint added to the store "
            "(checkpoints are incremental).", W), lambda w: w.last_checkpoint.bytes_copied if w.last_checkpoint
     else None),
    (Family("sparkpoint_worker_checkpoints_completed_total", "Checkpoints the controller acknowledged.", W,
            counter=True), lambda w: w.checkpoints_completed),
    (Family("sparkpoint_worker_checkpoints_dropped_total", "Checkpoints due while the previous one was still being "
            "written, in this run.", W, counter=True), lambda w: w.dropped_checkpoints),
    (Family("sparkpoint_worker_checkpoints_failed_total", "Checkpoints that failed, in this run.", W, counter=True),
     lambda w: w.failed_checkpoints),
    (Family("sparkpoint_worker_checkpoints_durable", "Checkpoints on the worker's volume (retained and pinned).", W),
     lambda w: w.durable_checkpoints),
    (Family("sparkpoint_worker_checkpoint_volume_used_bytes", "Bytes used on the filesystem of the worker's "
            "checkpoints (SP_CHECKPOINT_DIR).", W), lambda w: _volume(w).used_bytes if _volume(w) else None),
    (Family("sparkpoint_worker_checkpoint_volume_free_bytes", "Bytes free for the worker on that filesystem: at 0 "
            "checkpoints fail and staging waits.", W), lambda w: _volume(w).free_bytes if _volume(w) else None),
    (Family("sparkpoint_worker_restored_checkpoint_id", "The checkpoint this run restored (0: none).", W),
     lambda w: w.recovery.restored_checkpoint_id),
    (Family("sparkpoint_worker_recovering", "1 while the worker replays the log after restoring a checkpoint.", W),
     lambda w: 1.0 if w.recovery.active else 0.0),
    (Family("sparkpoint_worker_recovery_remaining_bytes", "Log still to replay before the recovery catches up.", W),
     lambda w: w.recovery.target_bytes - w.recovery.replayed_bytes if w.recovery.active else 0.0),
    (Family("sparkpoint_worker_recoveries_total", "Recoveries (a checkpoint restored, the log replayed) that caught "
            "up.", W, counter=True), lambda w: w.recoveries),
    (Family("sparkpoint_worker_restarts_total", "Restarts in the worker's living Spark session after a query "
            "failed, since its process started.", W, counter=True), lambda w: w.restarts.count),
]
WORKER_STATE = Family("sparkpoint_worker_state", "The worker's state: 1 for the current one.", ("worker", "state"))
CHECKPOINT_DURATION = "sparkpoint_worker_checkpoint_duration_seconds"
RECOVERY_DURATION = "sparkpoint_worker_recovery_duration_seconds"

# -- per query (one per sink node) --------------------------------------------------------
Q = ("worker", "query")
QUERY_FAMILIES: list[tuple[Family, Callable[[QueryProgress], float]]] = [
    (Family("sparkpoint_query_batches_total", "Batches the query committed since it began (Spark's batch id + 1; "
            "batch ids continue across restores).", Q, counter=True), lambda q: q.batch_id + 1),
    (Family("sparkpoint_query_rows_processed_total", "Rows the query processed in this run.", Q, counter=True),
     lambda q: q.rows_processed),
    (Family("sparkpoint_query_rows_per_second", "Rows per second in the query's last batch.", Q),
     lambda q: q.rows_per_second),
    (Family("sparkpoint_query_input_lag_bytes", "Input behind the source's end as of the query's last batch.", Q),
     lambda q: q.lag_bytes),
    (Family("sparkpoint_query_source_data_losses_total", "Times the query's Kafka source found records it had yet "
            "to read gone (retention, a partition vanished or went backwards) and went on, as "
            "from_kafka(fail_on_data_loss=False) allows; each is logged.", Q, counter=True), lambda q: q.data_losses),
    (Family("sparkpoint_query_active", "1 while the query runs (0: finished or failed).", Q),
     lambda q: 1.0 if q.active else 0.0),
]

# -- per sink (on each worker) -------------------------------------------------------------
S = ("worker", "sink")
SINK_FAMILIES: list[tuple[Family, Callable[[SinkView], float]]] = [
    (Family("sparkpoint_sink_published_batch_id", "The last batch the sink published (-1: none yet).", S),
     lambda s: s.published_batch_id),
    (Family("sparkpoint_sink_published_checkpoint_id", "The checkpoint the sink's mark names (0: none).", S),
     lambda s: s.published_checkpoint_id),
    (Family("sparkpoint_sink_pending_batches", "Batches staged and not yet published.", S),
     lambda s: s.pending_batches),
    (Family("sparkpoint_sink_publish_lag_batches", "Batches the sink's query committed past the one published.", S),
     lambda s: s.lag_batches),
    (Family("sparkpoint_sink_waiting", "1 while the sink's target fails and publishing waits to retry.", S),
     lambda s: 1.0 if s.state is SinkState.WAITING else 0.0),
    (Family("sparkpoint_sink_waiting_seconds", "Seconds the sink has been waiting (0 when not).", S),
     lambda s: s.waiting_s),
    (Family("sparkpoint_sink_publish_retries_total", "Failed publish attempts, each retried with backoff, in the "
            "worker's run.", S, counter=True), lambda s: s.retries),
]
KAFKA_LAG = Family("sparkpoint_query_kafka_lag_records", "Consumer lag: records of the Kafka partition past the "
                   "query's last batch, as of its planning.", ("worker", "query", "topic", "partition"))

LATE_ROWS = Family("sparkpoint_node_late_rows_total", "Rows the stateful node dropped as later than its "
                   "watermark allows, in the worker's run, as Spark counts them (after a window's partial "
                   "aggregation: one key's late records of one window in one batch count once).",
                   ("worker", "query", "node"), counter=True)

SINK_INFO = Family("sparkpoint_sink_info", "Each sink's target and delivery contract (always 1).",
                   ("worker", "sink", "target", "contract"))


def _topic_partition(key: str) -> list[str]:
    topic, partition = kafka_partition(key) or ("", 0)
    return [topic, str(partition)]


def _histogram(name: str, documentation: str, by_worker: dict[str, HistogramView]) -> Metric:
    family = HistogramMetricFamily(name, documentation, labels=["worker"])
    for worker, view in by_worker.items():
        family.add_metric([worker], [("+Inf" if bound == float("inf") else str(bound), count)
                                     for bound, count in view.buckets], view.sum)
    return family


def families(readings: Readings) -> Iterator[Metric]:
    """Every family, from one reading of the controller's state."""
    status, workers = readings.status, readings.status.workers
    yield PIPELINE_STATE.build(([state], value) for state, value in _states(WORKER_STATES, status.state))
    yield WORKERS_EXPECTED.build([([], status.workers_expected)])
    yield WORKERS_REGISTERED.build([([], status.workers_registered)])
    yield PIPELINE_ROWS_PER_SECOND.build([([], status.rows_per_second)])
    yield PIPELINE_LAG.build([([], status.lag_bytes)])
    yield NODES.build(([n.name, n.kind, str(n.stateful).lower()], 1.0 if n.finished else 0.0)
                      for n in readings.pipeline.nodes)
    yield STANDBYS.build(([state.value], sum(1 for s in status.standbys if s.state is state))
                         for state in StandbyState)
    yield SAVEPOINTS.build(([state.value], sum(1 for s in readings.savepoints if s.state is state))
                           for state in SavepointState)
    yield WORKER_STATE.build(([w.worker_id, state], value) for w in workers
                             for state, value in _states(WORKER_STATES, w.state.value))
    for family, value in WORKER_FAMILIES:
        yield family.build(([w.worker_id], v) for w in workers if (v := value(w)) is not None)
    yield _histogram(CHECKPOINT_DURATION, "Seconds each checkpoint took to write (cut, copy, manifest).",
                     {worker: d.checkpoints for worker, d in readings.durations.items()})
    yield _histogram(RECOVERY_DURATION, "Seconds from restoring a checkpoint until the replay caught up with the "
                     "log.", {worker: d.recoveries for worker, d in readings.durations.items()})
    for family, value in QUERY_FAMILIES:
        yield family.build(([w.worker_id, q.name], value(q)) for w in workers for q in w.queries)
    yield KAFKA_LAG.build(([w.worker_id, q.name, *_topic_partition(key)], records) for w in workers
                          for q in w.queries for key, records in q.kafka_lag.items())
    yield LATE_ROWS.build(([w.worker_id, q.name, node], rows) for w in workers for q in w.queries
                          for node, rows in q.late_rows.items())
    yield SINK_INFO.build(([w.worker_id, s.name, s.target, s.contract.value], 1.0) for w in workers for s in w.sinks)
    for family, value in SINK_FAMILIES:
        yield family.build(([w.worker_id, s.name], value(s)) for w in workers for s in w.sinks)


class ControllerCollector(Collector):
    """Reads the controller at each scrape."""

    def __init__(self, readings: Callable[[], Readings]) -> None:
        self._readings = readings

    def collect(self) -> Iterator[Metric]:
        yield from families(self._readings())


def metrics_router(service: ControllerService) -> APIRouter:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ControllerCollector(service.readings))
    router = APIRouter()

    @router.get("/metrics", response_class=Response, summary="Prometheus metrics (text exposition format)",
                responses={200: {"content": {"text/plain": {}, "application/openmetrics-text": {}},
                                 "description": "Prometheus' text format, or OpenMetrics when the Accept header "
                                                "asks for it"}})
    def metrics(request: Request) -> Response:
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(encoder(registry), media_type=content_type)

    return router
