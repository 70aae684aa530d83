"""Worker entry point: ``python -m worker``.

Steps:
1. Read settings (errors name the variable).
2. Fence the checkpoint directory: one live worker per directory. Only then
   load the pipeline file and check every sink can keep its contract as
   configured (errors name the variable or file): a container restarted
   just after a take-over of its index waits first (``claim``), before
   the imports of PySpark, gRPC and the pipeline take the cores the
   take-over's first batches need. Start the Spark session (its JVM is
   forked before any gRPC channel exists: gRPC's fork handlers can break
   the launch) and derive the pipeline's layout: which state belongs to
   which node. A standby (``SP_WORKER_ROLE``), or a worker whose index a
   live process holds, fences only now: it waits, its session warm, for
   the first index whose worker ends (``worker.lifecycle.claim``), and
   runs as that worker; meanwhile it tells the controller it stands by
   (``/status`` lists it).
3-8. Serve runs of the pipeline in that session (``worker.lifecycle.serve``)
   until one ends other than in a restart: a savepoint restore, or a failed
   query (restored into the same session after the restart policy's
   backoff; ``worker.lifecycle.restarts``). Only a failure the policy gives
   up on, or a dead JVM or process, ends the worker (and so its container).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING

# Light: what runs before the fence (step 2) imports nothing heavier.
from sparkpoint.settings import SettingsError, exit_with_error
from worker.checkpointing.lock import FenceError
from worker.healthcheck import clear_health, standing_by
from worker.lifecycle.claim import Claim, Standby, claim_own
from worker.lifecycle.holding import LockKeeper
from worker.settings import WorkerSettings

if TYPE_CHECKING:
    from worker.api.graph import Pipeline
    from worker.control.client import WorkerIdentity
    from worker.control.standby import StandbyAnnouncer

log = logging.getLogger("sparkpoint.worker")
PROGRAM = "sparkpoint-worker"
EXIT_STOPPED, EXIT_FAILED, EXIT_SUPERSEDED = 0, 1, 3


def hold(taken: Claim) -> LockKeeper:
    """Keep the index's lock touched; if another process broke it (this one
    was silent for SP_HEARTBEAT_TIMEOUT), say why and stop at once: not a
    thread of this process may write for the index again."""
    def superseded(reason: str) -> None:
        print(f"{PROGRAM}: error: {reason}: this process was silent for SP_HEARTBEAT_TIMEOUT (paused or cut off?); "
              f"it writes nothing more for index {taken.settings.worker_index} and stops", file=sys.stderr, flush=True)
        os._exit(EXIT_SUPERSEDED)

    keeper = LockKeeper(taken.store.lock, superseded)
    keeper.start()
    return keeper


def announced(settings: WorkerSettings, identity: WorkerIdentity, started_at: float) -> StandbyAnnouncer:
    """Tell the controller, every report interval, that this process stands
    by (with the credentials of its own index)."""
    from worker.control.client import ControllerClient
    from worker.control.standby import StandbyAnnouncer

    client = ControllerClient(settings.controller_addr, identity, token=settings.grpc_token_file,
                              tls=settings.grpc_tls)
    announcer = StandbyAnnouncer(client, settings.report_interval_ms / 1000, started_at=started_at)
    announcer.start()
    return announcer


def loaded(settings: WorkerSettings) -> Pipeline:
    """The pipeline file, loaded, its sources and sinks checked against the settings;
    exits naming the file or variable if either fails."""
    from worker.api.graph import PipelineError
    from worker.api.loader import load_pipeline
    from worker.publishing.sinks import check_sinks
    from worker.runtime.queries import check_sources

    try:
        pipeline = load_pipeline(settings.pipeline)
        check_sources(pipeline, settings)
        check_sinks(pipeline, settings)
    except (SettingsError, PipelineError) as error:
        exit_with_error(PROGRAM, error)
    return pipeline


def run(settings: WorkerSettings, standby: Standby | None, stop: threading.Event) -> int:
    """Steps 2-8; returns the exit status. ``standby``: how this worker waits
    for an index if it may take over another (``settings.takes_over``)."""
    clear_health(settings.work_dir)
    started_at, host, pid = time.time(), socket.gethostname(), os.getpid()
    # 2. The fence: a worker takes its own index at once; a standby (or a
    #    worker whose index a live process holds, with takes_over) once its
    #    Spark session is up -- which it starts only once the workers have
    #    checkpointed new batches (``claim``: their start or take-over first).
    taken = None
    try:
        if settings.worker_role == "worker":
            taken = claim_own(settings, stop)
        elif standby is not None:
            standby.hold_back(stop)
    except (FenceError, OSError) as error:
        exit_with_error(PROGRAM, f"SP_CHECKPOINT_DIR: {error}")
    if stop.is_set():
        return EXIT_STOPPED
    if taken is not None:
        keeper = hold(taken)
    pipeline = loaded(settings)
    from pyspark.errors import PySparkException

    from worker.control.client import ControllerClient, WorkerIdentity
    from worker.lifecycle.restarts import RestartPolicy
    from worker.lifecycle.serve import RunEnd, Session, serve
    from worker.runtime.progress import summarize_error
    from worker.runtime.session import MissingJar, start_session
    from worker.stateplan.derive import stateful_schemas
    from worker.stateplan.layout import pipeline_layout

    started = time.monotonic()
    try:
        spark = start_session(settings)
    except MissingJar as error:
        exit_with_error(PROGRAM, str(error))
    except PySparkException as error:
        exit_with_error(PROGRAM, f"cannot start Spark (SP_SPARK_MASTER={settings.spark_master}): "
                                 f"{summarize_error(str(error))}")
    log.info("Spark session started in %.1f s", time.monotonic() - started)
    if settings.spark_ui_port is not None:
        log.info("Spark's UI: %s", spark.sparkContext.uiWebUrl)
    started = time.monotonic()
    from worker.api.graph import PipelineError

    try:
        layout = pipeline_layout(pipeline, stateful_schemas(pipeline, spark))
    except PipelineError as error:      # found by Spark's analysis: a window's column not a timestamp
        exit_with_error(PROGRAM, f"{settings.pipeline}: {error}")
    except PySparkException as error:
        exit_with_error(PROGRAM, f"{settings.pipeline}: {summarize_error(str(error))}")
    log.info("pipeline layout derived in %.1f s", time.monotonic() - started)
    if taken is None and standby is not None:
        from worker.runtime.rehearsal import rehearse

        announcer = announced(settings, WorkerIdentity(settings.worker_id, settings.worker_index,
                                                       settings.worker_count, pipeline.fingerprint(),
                                                       layout.node_names, host=host, pid=pid), started_at)
        try:
            rehearse(spark, pipeline, settings, settings.work_dir / "rehearsal", stop)
            announcer.ready()
            taken = standby.wait(stop, on_idle=lambda: standing_by(settings.work_dir))
        except OSError as error:
            exit_with_error(PROGRAM, f"SP_CHECKPOINT_DIR: {error}")
        finally:
            announcer.stop()
        if taken is None:
            spark.stop()
            return EXIT_STOPPED
        keeper = hold(taken)
    settings, store, fence = taken.settings, taken.store, taken.fence
    checkpoints_on = settings.checkpoint_freq_ms > 0
    for problem in store.quarantine_unreadable() if checkpoints_on else []:
        log.error("unreadable checkpoint manifest, moved to quarantine: %s", problem)
    identity = WorkerIdentity(settings.worker_id, settings.worker_index, settings.worker_count,
                              pipeline.fingerprint(), layout.node_names, pipeline.graph(), fence, host, pid)
    client = ControllerClient(settings.controller_addr, identity,
                              checkpoints=lambda: [m.info() for m in store.readable()[0]] if checkpoints_on else [],
                              token=settings.grpc_token_file, tls=settings.grpc_tls)
    session = Session(settings, pipeline, layout, store, spark, client,
                      RestartPolicy(settings.max_same_failures, clock=time.time), fence)
    try:
        # 3-8.
        while (outcome := serve(session, stop)).end is RunEnd.RESTART:
            if stop.wait(outcome.delay_s):
                return EXIT_STOPPED
            log.info("restarting the pipeline in this Spark session")
        if outcome.reason:
            print(f"{PROGRAM}: error: {outcome.reason}", file=sys.stderr)
        return EXIT_FAILED if outcome.end is RunEnd.FAILED else EXIT_STOPPED
    finally:
        client.close()
        spark.stop()
        keeper.stop()
        store.release()


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    # 1.
    try:
        settings = WorkerSettings.from_env(os.environ)
        # Every index's settings, checked now: not when a worker dies.
        standby = Standby(os.environ, settings) if settings.takes_over else None
    except SettingsError as error:
        exit_with_error(PROGRAM, error)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    raise SystemExit(run(settings, standby, stop))


if __name__ == "__main__":
    main()
