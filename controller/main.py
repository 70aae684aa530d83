"""Controller entry point: ``python -m controller``."""

from __future__ import annotations

import logging
import os
import signal
import socket
import time

import uvicorn

from controller.checkpointing.store import ControllerCheckpointError, ControllerCheckpointStore, PeriodicCheckpointer
from controller.core.service import ControllerService, InvalidSnapshot, ServiceConfig
from controller.grpc.servicer import start_grpc_server
from controller.rest.access import Access
from controller.rest.app import create_app
from controller.savepoints.service import SavepointConfig, SavepointService
from controller.settings import ControllerSettings
from sparkpoint.settings import SettingsError, exit_with_error

log = logging.getLogger("sparkpoint.controller")


def check_port_free(host: str, port: int) -> None:
    """Fail before starting anything if the REST port is taken (uvicorn would
    only log it and exit)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        settings = ControllerSettings.from_env(os.environ)
    except SettingsError as error:
        exit_with_error("sparkpoint-controller", error)
    if settings.api_token is None:
        log.warning("SP_API_AUTH=none: the REST API answers anyone who reaches %s:%d, without a token",
                    settings.bind, settings.http_port)
    if settings.grpc_token is None:
        log.warning("SP_GRPC_AUTH=none: the gRPC service answers anyone who reaches %s:%d, without a token",
                    settings.bind, settings.grpc_port)
    try:
        check_port_free(settings.bind, settings.http_port)
    except OSError as error:
        exit_with_error("sparkpoint-controller", f"SP_CONTROLLER_HTTP_PORT: cannot listen on "
                                                 f"{settings.bind}:{settings.http_port}: {error.strerror}")
    savepoint_config = SavepointConfig(records=settings.state_dir / "savepoints", root=settings.savepoint_dir,
                                       timeout_s=settings.savepoint_timeout_ms / 1000,
                                       worker_count=settings.worker_count)
    try:
        savepoints, problems = SavepointService.open(savepoint_config, clock=time.time)
    except OSError as error:
        exit_with_error("sparkpoint-controller", f"SP_CONTROLLER_STATE_DIR: savepoint records: {error}")
    for problem in problems:
        log.error("%s", problem)
    store = ControllerCheckpointStore(settings.state_dir) if settings.checkpoint_freq_ms > 0 else None
    service = ControllerService(ServiceConfig(worker_count=settings.worker_count), clock=time.time,
                                savepoints=savepoints, **({"save_table": store.save} if store else {}))
    checkpointer = None
    if store is not None:
        try:
            saved = store.load()
            if saved is not None:
                service.load_snapshot(saved)
        except ControllerCheckpointError as error:
            exit_with_error("sparkpoint-controller", f"SP_CONTROLLER_STATE_DIR: {error}")
        except InvalidSnapshot as error:
            exit_with_error("sparkpoint-controller",
                            f"SP_CONTROLLER_STATE_DIR: {store.path}: not a valid controller checkpoint ({error})")
        if saved is not None:
            log.info("resumed from %s: %d workers", store.path, len(saved.get("workers", [])))
        checkpointer = PeriodicCheckpointer(store, service.snapshot, settings.checkpoint_freq_ms)
        checkpointer.start()
    try:
        grpc_server, grpc_port = start_grpc_server(service, settings.bind, settings.grpc_port,
                                                     token=settings.grpc_token, tls=settings.grpc_tls)
    except (OSError, RuntimeError) as error:
        exit_with_error("sparkpoint-controller", f"SP_CONTROLLER_GRPC_PORT: {error}")
    log.info("gRPC on %s:%d (%s), REST on http://%s:%d (expecting %d workers)",
             settings.bind, grpc_port, "mutual TLS" if settings.grpc_tls else "plain text", settings.bind,
             settings.http_port, settings.worker_count)
    # uvicorn shuts down gracefully on SIGTERM/SIGINT, then re-raises the
    # signal against the handlers it found: make those a no-op so the gRPC
    # server below is stopped too and the exit status is 0.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    app = create_app(service, checkpointer.problems if checkpointer is not None else list,
                     access=Access(settings.api_token, settings.allowed_hosts))
    server = uvicorn.Server(uvicorn.Config(app, host=settings.bind, port=settings.http_port,
                                           log_level="warning"))
    try:
        server.run()
    finally:
        grpc_server.stop(grace=2).wait()
        if checkpointer is not None:
            checkpointer.stop()


if __name__ == "__main__":
    main()
