"""A local Sparkpoint stack as plain processes: ``make run``.

Starts a controller, N workers and a producer on the embedded defaults
(event log source, files sink) under ``var/``, prints where to look, and
stops everything on Ctrl-C. The integration tests drive the same class.
The controller listens on 127.0.0.1; its REST token is generated on first
start into ``<root>/secrets/api-token`` (``SP_API_TOKEN_FILE`` of every
service, unless the caller's environment sets it or ``SP_API_AUTH``), the
gRPC secret likewise into ``grpc-token`` (``SP_GRPC_TOKEN_FILE``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from pydantic import Field

from sparkpoint.secrets import Secret, UnsafeSecretsDirectory, ensure_secret, read_secret
from sparkpoint.settings import GrpcPort, HttpPort, Settings, SettingsError, UserPath, exit_with_error

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class StackConfig:
    root: Path                      # everything the stack writes lives here
    workers: int = 2
    grpc_port: int = 50051
    http_port: int = 8080
    pipeline: Path = REPO / "pipelines" / "trades.py"
    env: dict[str, str] = field(default_factory=dict)   # extra SP_* settings for every service

    @property
    def log_dir(self) -> Path:
        return self.root / "log"

    @property
    def output_dir(self) -> Path:
        return self.root / "output"

    @property
    def status_url(self) -> str:
        return f"http://localhost:{self.http_port}/status"

    def work_dir(self, index: int) -> Path:
        return self.root / "work" / f"worker-{index}"

    def checkpoint_dir(self, index: int) -> Path:
        return self.root / "checkpoints" / f"worker-{index}"

    @property
    def checkpoint_dirs(self) -> str:
        """Every index's checkpoint directory, as ``SP_CHECKPOINT_DIR`` names
        them for a worker that may take over any index."""
        return str(self.root / "checkpoints" / "worker-{index}")

    @property
    def api_token_file(self) -> Path:
        return self.root / "secrets" / "api-token"

    @property
    def grpc_token_file(self) -> Path:
        return self.root / "secrets" / "grpc-token"

    @property
    def api_token(self) -> str | None:
        """The controller's REST token; None when the stack runs without one."""
        if "SP_API_AUTH" in self.env or "SP_API_TOKEN_FILE" in self.env:
            path = self.env.get("SP_API_TOKEN_FILE")
            return Path(path).read_text().strip() if path else None
        return self.api_token_file.read_text().strip()

    @property
    def grpc_token(self) -> Secret | None:
        """The gRPC shared secret, for clients the tests start; None without one."""
        path = self.env.get("SP_GRPC_TOKEN_FILE") or (None if "SP_GRPC_AUTH" in self.env else self.grpc_token_file)
        return read_secret(Path(path)) if path else None

    def secrets_env(self) -> dict[str, str]:
        """The secrets every service is given: generated under ``root/secrets`` on
        first start, unless the caller chose (``SP_API_TOKEN_FILE`` / ``SP_API_AUTH``,
        ``SP_GRPC_TOKEN_FILE`` / ``SP_GRPC_AUTH``)."""
        env = {}
        if "SP_API_AUTH" not in self.env and "SP_API_TOKEN_FILE" not in self.env:
            env["SP_API_TOKEN_FILE"] = str(ensure_secret(self.api_token_file))
        if "SP_GRPC_AUTH" not in self.env and "SP_GRPC_TOKEN_FILE" not in self.env:
            env["SP_GRPC_TOKEN_FILE"] = str(ensure_secret(self.grpc_token_file))
        return env


@dataclass
class Service:
    name: str
    process: subprocess.Popen
    log_path: Path
    log_file: IO[bytes]


class LocalStack:
    def __init__(self, config: StackConfig) -> None:
        self.config = config
        self.services: dict[str, Service] = {}
        (config.root / "logs").mkdir(parents=True, exist_ok=True)

    def _base_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SP_")}
        env.update({
            "PYTHONUNBUFFERED": "1",
            "SP_LOG_DIR": str(self.config.log_dir),
            "SP_OUTPUT_DIR": str(self.config.output_dir),
            "SP_WORKER_COUNT": str(self.config.workers),
            "SP_CONTROLLER_GRPC_PORT": str(self.config.grpc_port),
            "SP_CONTROLLER_HTTP_PORT": str(self.config.http_port),
            "SP_CONTROLLER_ADDR": f"localhost:{self.config.grpc_port}",
            "SP_PIPELINE": str(self.config.pipeline),
            **self.config.secrets_env(),
        })
        env.update(self.config.env)
        return env

    def _start(self, name: str, module: str, env: dict[str, str]) -> Service:
        log_path = self.config.root / "logs" / f"{name}.log"
        log_file = open(log_path, "ab")
        process = subprocess.Popen([sys.executable, "-m", module], cwd=REPO, env=env,
                                   stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
        service = Service(name, process, log_path, log_file)
        self.services[name] = service
        return service

    def start_controller(self, **extra: str) -> Service:
        env = {**self._base_env(), "SP_CONTROLLER_STATE_DIR": str(self.config.root / "controller"), **extra}
        return self._start("controller", "controller", env)

    def start_worker(self, index: int, *, takes_over: bool = False, **extra: str) -> Service:
        """``takes_over``: it waits as a standby while another process holds its index."""
        env = {
            **self._base_env(),
            "SP_WORKER_INDEX": str(index),
            "SP_WORK_DIR": str(self.config.work_dir(index)),
            "SP_CHECKPOINT_DIR": self.config.checkpoint_dirs if takes_over else str(self.config.checkpoint_dir(index)),
            **extra,
        }
        return self._start(f"worker-{index}", "worker", env)

    def start_standby(self, name: str = "standby", **extra: str) -> Service:
        """A worker that takes over the index of the first worker whose process ends."""
        env = {
            **self._base_env(),
            "SP_WORKER_ROLE": "standby",
            "SP_WORK_DIR": str(self.config.root / "work" / name),
            "SP_CHECKPOINT_DIR": self.config.checkpoint_dirs,
            **extra,
        }
        return self._start(name, "worker", env)

    def start_producer(self, **extra: str) -> Service:
        return self._start("producer", "sparkpoint.producer", {**self._base_env(), **extra})

    def start_all(self) -> None:
        self.start_controller()
        self.start_producer()
        for index in range(self.config.workers):
            self.start_worker(index)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> int:
        """Signal a service's whole process group (Spark's JVM included); returns its exit code."""
        service = self.services[name]
        try:
            os.killpg(service.process.pid, sig)
        except ProcessLookupError:
            pass
        code = service.process.wait(timeout=60)
        service.log_file.close()
        return code

    def stop(self, name: str, timeout_s: float = 60) -> int:
        """Graceful stop (SIGTERM to the service, which stops its Spark session
        itself), escalating to SIGKILL after ``timeout_s``."""
        service = self.services[name]
        if service.process.poll() is None:
            try:
                service.process.terminate()
                return_code = service.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return_code = self.kill(name)
            except ProcessLookupError:
                return_code = service.process.wait()
        else:
            return_code = service.process.returncode
        # Spark's JVM shares the process group: make sure nothing outlives us.
        try:
            os.killpg(service.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        service.log_file.close()
        return return_code

    def stop_all(self) -> dict[str, int]:
        order = [n for n in self.services if n.startswith("worker")] + \
                [n for n in self.services if not n.startswith("worker")]
        return {name: self.stop(name) for name in order}


class DevStackSettings(Settings):
    program = "`make run`"

    root: UserPath = Field(Path("var"), validation_alias="SP_DEV_ROOT",
                           description="where `make run` keeps everything the stack writes (relative to the "
                                       "repository)")
    workers: int = Field(2, ge=1, le=64, validation_alias="SP_WORKER_COUNT", description="workers to start")
    grpc_port: GrpcPort = Field(50051, validation_alias="SP_CONTROLLER_GRPC_PORT")
    http_port: HttpPort = Field(8080, validation_alias="SP_CONTROLLER_HTTP_PORT")


# Set per service by the stack itself; every other SP_* variable of the
# caller's environment reaches all services.
_PER_SERVICE = {"SP_WORKER_INDEX", "SP_WORKER_ID", "SP_WORK_DIR", "SP_CHECKPOINT_DIR", "SP_WORKER_ROLE"}


def main() -> None:
    try:
        settings = DevStackSettings.from_env(os.environ)
    except SettingsError as error:
        exit_with_error("make run", error)
    config = StackConfig(
        root=REPO / settings.root,
        workers=settings.workers,
        grpc_port=settings.grpc_port,
        http_port=settings.http_port,
        env={k: v for k, v in os.environ.items() if k.startswith("SP_") and k not in _PER_SERVICE},
    )
    stack = LocalStack(config)
    try:
        stack.start_all()
    except UnsafeSecretsDirectory as error:
        exit_with_error("make run", error)
    print(f"Sparkpoint is running: controller, producer and {config.workers} workers.")
    token = f" -H \"Authorization: Bearer $(cat {config.api_token_file})\"" if config.api_token else ""
    print(f"  status:   curl{token} {config.status_url}")
    if config.api_token:
        print(f"  CLI:      SP_API_TOKEN_FILE={config.api_token_file} sparkpoint status")
    print(f"  API docs: http://localhost:{config.http_port}/docs")
    print(f"  output:   {config.output_dir}")
    print(f"  logs:     {config.root / 'logs'}")
    print("Press Ctrl-C to stop.")
    stopping = False

    def on_signal(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    while not stopping:
        for service in stack.services.values():
            if service.process.poll() is not None:
                print(f"{service.name} exited with {service.process.returncode}; see {service.log_path}")
                stopping = True
        time.sleep(0.5)
    print("stopping ...")
    codes = stack.stop_all()
    print("stopped: " + ", ".join(f"{name}={code}" for name, code in codes.items()))


if __name__ == "__main__":
    main()
