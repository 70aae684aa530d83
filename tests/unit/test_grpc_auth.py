"""Issue 15, gRPC: a call without the shared secret (``SP_GRPC_TOKEN_FILE``)
or with a wrong one ends UNAUTHENTICATED before any handler runs; the
controller does not start without one unless ``SP_GRPC_AUTH=none``; the
worker sends it. A second process registering as a live worker is refused
(ALREADY_EXISTS) and the worker's client waits for the old session to fall
silent instead of giving up."""

from __future__ import annotations

import threading

import grpc
import pytest

from controller.settings import ControllerSettings
from sparkpoint.grpcauth import with_token
from sparkpoint.secrets import Secret
from sparkpoint.settings import SettingsError
from sparkpoint.v1 import controller_pb2 as pb
from sparkpoint.v1 import controller_pb2_grpc as pb_grpc
from tests.unit.fakes import process_died
from tests.unit.grpc_support import GRPC_TOKEN
from tests.unit.test_settings import run_module
from worker.control.client import ControllerClient, RegistrationRefused, WorkerIdentity
from worker.settings import WorkerSettings

CALLS = {
    "Register": pb.RegisterRequest(worker_id="w9", worker_index=0, worker_count=2, pipeline_fingerprint="fp"),
    "ReportProgress": pb.ProgressReport(worker_id="w0", session_id="s1", seq=99, state=pb.WORKER_STATE_FAILED),
    "CommitCheckpoint": pb.CheckpointCommit(worker_id="w0", session_id="s1",
                                            checkpoint=pb.CheckpointRef(checkpoint_id=50)),
}
WRONG = Secret(GRPC_TOKEN.path, GRPC_TOKEN.value + "x")


def call_with(address: str, metadata: tuple, rpc: str) -> grpc.RpcError | None:
    with grpc.insecure_channel(address) as channel:
        try:
            getattr(pb_grpc.ControllerStub(channel), rpc)(CALLS[rpc], timeout=5, metadata=metadata)
        except grpc.RpcError as error:
            return error
    return None


@pytest.mark.parametrize("rpc", sorted(CALLS))
@pytest.mark.parametrize("metadata", [
    (),                                                            # no token
    (("authorization", f"Bearer {WRONG.value}"),),                 # a wrong one
    (("authorization", f"Bearer {GRPC_TOKEN.value[:-1]}"),),       # a prefix of it
    (("authorization", GRPC_TOKEN.value),),                        # no scheme
    (("x-token", f"Bearer {GRPC_TOKEN.value}"),),                  # another key
])
def test_every_rpc_without_the_right_token_is_unauthenticated_and_changes_nothing(address, pipeline, service, rpc,
                                                                                  metadata):
    before = service.snapshot()
    error = call_with(address, metadata, rpc)
    assert error is not None and error.code() is grpc.StatusCode.UNAUTHENTICATED
    assert "SP_GRPC_TOKEN_FILE" in error.details() and GRPC_TOKEN.value not in error.details()
    assert service.snapshot() == before and service.worker("w9") is None


def test_with_the_token_the_same_calls_are_answered(address, pipeline):
    for rpc in CALLS:
        error = call_with(address, (("authorization", f"Bearer {GRPC_TOKEN.value}"),), rpc)
        assert error is None or error.code() is not grpc.StatusCode.UNAUTHENTICATED, rpc


def test_a_worker_without_the_token_is_refused_and_told_what_to_set(address):
    for token in (None, WRONG):
        client = ControllerClient(address, WorkerIdentity("w0", 0, 2, "fp", ()), timeout_s=5, token=token)
        with pytest.raises(RegistrationRefused, match="SP_GRPC_TOKEN_FILE"):
            client.register(threading.Event(), wait=lambda _: False)
        client.close()


def test_the_worker_client_sends_the_token_on_every_call(address):
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.ControllerStub(with_token(channel, GRPC_TOKEN))
        assert stub.Register(CALLS["Register"], timeout=5).session_id


# --- a second process as a live worker ---------------------------------------------------------

def test_a_second_process_waits_until_the_live_session_is_silent(address, service, clock):
    live = ControllerClient(address, WorkerIdentity("w0", 0, 2, "fp", ()), timeout_s=5, token=GRPC_TOKEN)
    live.register_once()
    second = ControllerClient(address, WorkerIdentity("w0", 0, 2, "fp", ()), timeout_s=5, token=GRPC_TOKEN)
    with pytest.raises(grpc.RpcError) as refused:
        second.register_once()
    assert refused.value.code() is grpc.StatusCode.ALREADY_EXISTS
    assert service.worker("w0").session_id == live.session_id
    waits: list[float] = []

    def wait(delay: float) -> bool:            # the backoff's waits, on the fake clock
        waits.append(delay)
        if len(waits) == 3:
            process_died(clock)                 # the live one stopped reporting
        return False

    registered = second.register(threading.Event(), wait=wait)
    assert registered is not None and len(waits) == 3
    assert service.worker("w0").session_id == second.session_id != live.session_id
    live.close()
    second.close()


# --- settings ----------------------------------------------------------------------------------

@pytest.mark.parametrize("env, variable, needle", [
    ({"SP_API_AUTH": "none"}, "SP_GRPC_TOKEN_FILE", "is required"),
    ({"SP_API_AUTH": "none", "SP_GRPC_TOKEN_FILE": "/nonexistent/grpc"}, "SP_GRPC_TOKEN_FILE", "cannot read"),
    ({"SP_API_AUTH": "none", "SP_GRPC_AUTH": "no"}, "SP_GRPC_AUTH", "'no'"),
])
def test_bad_grpc_settings_name_the_variable(env, variable, needle):
    with pytest.raises(SettingsError) as raised:
        ControllerSettings.from_env(env)
    assert raised.value.variable == variable and needle in str(raised.value)


def test_the_grpc_token_is_read_by_the_controller_and_the_worker(tmp_path):
    (tmp_path / "grpc").write_text(GRPC_TOKEN.value + "\n")
    env = {"SP_API_AUTH": "none", "SP_GRPC_TOKEN_FILE": str(tmp_path / "grpc")}
    assert ControllerSettings.from_env(env).grpc_token.matches(GRPC_TOKEN.value)
    assert WorkerSettings.from_env(env).grpc_token_file.value == GRPC_TOKEN.value
    assert ControllerSettings.from_env({"SP_API_AUTH": "none", "SP_GRPC_AUTH": "none"}).grpc_token is None


def test_the_controller_does_not_start_without_a_grpc_token():
    result = run_module("controller", SP_API_AUTH="none")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("sparkpoint-controller: error: SP_GRPC_TOKEN_FILE: is required")
