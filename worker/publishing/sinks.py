"""Which publication each of a pipeline's sinks gets: contract, target, staging."""

from __future__ import annotations

import logging
from pathlib import Path

from sparkpoint.errors import shown
from sparkpoint.faults import FaultInjector
from sparkpoint.messages import SinkContract, VolumeFence
from sparkpoint.settings import SettingsError
from worker.api.graph import Node, Pipeline, Stream
from worker.publishing.book import Contract, SinkBook
from worker.publishing.publisher import Publication
from worker.publishing.staging import StagingArea
from worker.publishing.targets import Target
from worker.publishing.targets.files import FilesTarget
from worker.publishing.targets.kafka import (
    KafkaTransactionalTarget,
    required_transaction_timeout_ms,
    transaction_timeout_ms,
)
from worker.publishing.targets.postgres import PostgresTransactionalTarget, PostgresUpsertTarget
from worker.settings import WorkerSettings

log = logging.getLogger("sparkpoint.worker.publisher")

STAGED_KINDS = ("sink.files", "sink.postgres", "sink.kafka")


def stages(sink: Node) -> bool:
    """Whether the sink stages its batches (every sink but the console)."""
    return sink.kind in STAGED_KINDS


def staged_branches(pipeline: Pipeline) -> list[Stream]:
    """Branches whose sink stages its batches."""
    return [branch for branch in pipeline.branches if stages(branch.sink)]


def staging_root(settings: WorkerSettings, sink: str) -> Path:
    return settings.checkpoint_dir / "staging" / sink


def check_sinks(pipeline: Pipeline, settings: WorkerSettings) -> None:
    """Refuse, naming the setting, a sink that cannot keep its contract as configured."""
    for branch in staged_branches(pipeline):
        sink = branch.sink
        if sink.kind == "sink.kafka":
            _check_kafka_sink(sink, settings)
        if sink.kind != "sink.postgres":
            continue
        if settings.postgres is None:
            raise SettingsError("SP_PG_HOST", f"sink {sink.name} writes to PostgreSQL: set SP_PG_HOST "
                                              "(and SP_PG_PORT, SP_PG_DATABASE, SP_PG_USER, SP_PG_PASSWORD) "
                                              "or SP_PG_DSN")
        if "key" not in sink.params and settings.checkpoint_freq_ms == 0:
            raise SettingsError("SP_CHECKPOINT_FREQ", f"is 0, but sink {sink.name} publishes to PostgreSQL table "
                                                      f"{sink.params['table']} on checkpoint completion: enable "
                                                      "checkpoints, or give to_postgres a key and version (upsert)")


def _check_kafka_sink(sink: Node, settings: WorkerSettings) -> None:
    topic = sink.params["topic"]
    if settings.kafka is None:
        raise SettingsError("SP_KAFKA_BOOTSTRAP", f"sink {sink.name} writes to Kafka topic {topic}: set "
                                                  "SP_KAFKA_BOOTSTRAP")
    if settings.checkpoint_freq_ms == 0:
        raise SettingsError("SP_CHECKPOINT_FREQ", f"is 0, but sink {sink.name} publishes to Kafka topic {topic} "
                                                  "in transactions on checkpoint completion: enable checkpoints")
    try:
        timeout = transaction_timeout_ms(settings.kafka[0])
    except ValueError:
        raise SettingsError("SP_KAFKA_CONFIG", "transaction.timeout.ms is a whole number of milliseconds, got "
                                               f"{shown(settings.kafka[0]['transaction.timeout.ms'])}") from None
    needed = required_transaction_timeout_ms(settings.checkpoint_freq_ms, settings.heartbeat_timeout_ms)
    if timeout < needed:
        raise SettingsError("SP_KAFKA_CONFIG", f"transaction.timeout.ms is {timeout}, too short for sink {sink.name}: "
                                               f"a publish after a take-over holds about SP_CHECKPOINT_FREQ + "
                                               f"SP_HEARTBEAT_TIMEOUT of output and must commit before the broker "
                                               f"aborts it; give at least {needed} (twice that)")


def publication(branch: Stream, query: str, settings: WorkerSettings, run: str, fence: VolumeFence) -> Publication:
    """``query``: the branch's query's name; ``fence``: this process's of the
    checkpoint volume, which the marks carry."""
    sink = branch.sink
    checkpoints_on = settings.checkpoint_freq_ms > 0
    target: Target
    if sink.kind == "sink.files":
        target = FilesTarget(settings.output_dir / sink.params["directory"], settings.worker_id,
                             complete=branch.complete, fence=fence,
                             faults=FaultInjector(settings.test_fault, settings.checkpoint_dir))
        contract = SinkContract.TRANSACTIONAL
        if not checkpoints_on:
            contract = SinkContract.AT_LEAST_ONCE
            log.warning("sink %s: checkpoints are off (SP_CHECKPOINT_FREQ=0): batches are published as they come, "
                        "and a restart replays the source from its beginning and publishes it again "
                        "(at-least-once)", sink.name)
    elif sink.kind == "sink.kafka":
        config, config_files = settings.kafka
        target = KafkaTransactionalTarget(config, config_files, sink.params["topic"], sink=sink.name,
                                          worker_id=settings.worker_id, key=sink.params.get("key"),
                                          create=sink.params.get("create", False), fence=fence,
                                          faults=FaultInjector(settings.test_fault, settings.checkpoint_dir))
        contract = SinkContract.TRANSACTIONAL
    elif "key" in sink.params:
        target = PostgresUpsertTarget(settings.postgres, sink.params["table"], key=sink.params["key"],
                                      version=sink.params["version"], worker_id=settings.worker_id, fence=fence)
        contract = SinkContract.UPSERT
    else:
        target = PostgresTransactionalTarget(settings.postgres, sink.params["table"], sink=sink.name,
                                             worker_id=settings.worker_id, complete=branch.complete, fence=fence,
                                             faults=FaultInjector(settings.test_fault, settings.checkpoint_dir))
        contract = SinkContract.TRANSACTIONAL
    # Transactional sinks publish on checkpoint completion; the others as batches come.
    schedule = Contract.ON_COMPLETION if contract is SinkContract.TRANSACTIONAL else Contract.IMMEDIATE
    return Publication(name=sink.name, query=query, contract=contract, book=SinkBook(schedule, complete=branch.complete),
                       target=target, staging=StagingArea(staging_root(settings, sink.name), run))


def publications(pipeline: Pipeline, settings: WorkerSettings, run: str, fence: VolumeFence) -> list[Publication]:
    return [publication(branch, query.name, settings, run, fence)
            for query in pipeline.queries() for branch in query.branches if stages(branch.sink)]
