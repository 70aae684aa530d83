"""Issue 15, gRPC over mutual TLS (``SP_GRPC_TLS_*``): the controller serves
only clients holding a certificate its CA signed, and binds each call to the
worker id that certificate names; the worker's client verifies the
controller's certificate and name. Real TLS on 127.0.0.1, with certificates
from sparkpoint/pki.py (what ``make up`` generates)."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import grpc
import pytest

from controller.grpc.servicer import start_grpc_server
from controller.settings import ControllerSettings
from sparkpoint import pki
from sparkpoint.grpcauth import open_channel, with_token
from sparkpoint.secrets import TlsFiles
from sparkpoint.settings import SettingsError
from sparkpoint.v1 import controller_pb2 as pb
from sparkpoint.v1 import controller_pb2_grpc as pb_grpc
from tests.unit.grpc_support import GRPC_TOKEN
from worker.control.client import ControllerClient, RegistrationRefused, WorkerIdentity
from worker.settings import WorkerSettings


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("pki")
    ca = pki.ensure_ca(directory)
    pki.ensure_certificate(directory, "controller", ["localhost", "127.0.0.1"], ca)
    for worker in ("w0", "w1"):
        pki.ensure_certificate(directory, worker, [worker], ca)
    pki.ensure_certificate(directory / "other", "w0", ["w0"], pki.ensure_ca(directory / "other"))
    return directory


def files(directory: Path, name: str, ca: Path | None = None) -> TlsFiles:
    return TlsFiles(directory / f"{name}.crt", directory / f"{name}.key", ca or directory / "ca.crt")


@pytest.fixture
def tls_address(service, certificates) -> str:
    server, port = start_grpc_server(service, "127.0.0.1", 0, token=GRPC_TOKEN,
                                     tls=files(certificates, "controller"))
    yield f"localhost:{port}"
    server.stop(grace=None).wait()


def register(address: str, worker_id: str, tls: TlsFiles | None, index: int = 0) -> pb.RegisterResponse:
    with open_channel(address, tls) as channel:
        stub = pb_grpc.ControllerStub(with_token(channel, GRPC_TOKEN))
        return stub.Register(pb.RegisterRequest(worker_id=worker_id, worker_index=index, worker_count=2,
                                                pipeline_fingerprint="fp"), timeout=5)


def test_a_worker_registers_over_mutual_tls_as_its_certificate_names_it(tls_address, certificates, service):
    assert register(tls_address, "w0", files(certificates, "w0")).session_id
    assert service.worker("w0") is not None


@pytest.mark.parametrize("client", ["plain text", "no certificate", "another CA's certificate"])
def test_a_client_without_a_certificate_the_ca_signed_gets_no_answer(tls_address, certificates, service, client):
    tls = {"plain text": None,
           "no certificate": None,
           "another CA's certificate": files(certificates / "other", "w0", certificates / "ca.crt")}[client]
    with pytest.raises(grpc.RpcError) as refused:
        if client == "no certificate":
            with grpc.secure_channel(tls_address, grpc.ssl_channel_credentials(
                    (certificates / "ca.crt").read_bytes())) as channel:
                pb_grpc.ControllerStub(with_token(channel, GRPC_TOKEN)).Register(
                    pb.RegisterRequest(worker_id="w0", worker_index=0, worker_count=2, pipeline_fingerprint="fp"),
                    timeout=5)
        else:
            register(tls_address, "w0", tls)
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
    assert service.worker("w0") is None


def test_one_workers_certificate_cannot_act_for_another(tls_address, certificates, service):
    session = register(tls_address, "w0", files(certificates, "w0")).session_id
    with pytest.raises(grpc.RpcError) as refused:
        register(tls_address, "w1", files(certificates, "w0"), index=1)
    assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert "for 'w0', not for worker 'w1'" in refused.value.details()
    assert service.worker("w1") is None
    # w1's own certificate, w0's session: a commit for w0 is refused before the core sees it.
    before = service.snapshot()
    with open_channel(tls_address, files(certificates, "w1")) as channel:
        stub = pb_grpc.ControllerStub(with_token(channel, GRPC_TOKEN))
        with pytest.raises(grpc.RpcError) as forged:
            stub.CommitCheckpoint(pb.CheckpointCommit(worker_id="w0", session_id=session,
                                                      checkpoint=pb.CheckpointRef(checkpoint_id=1)), timeout=5)
    assert forged.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert service.snapshot() == before


def test_a_standby_stands_by_as_its_certificate_names_it_and_as_no_other(tls_address, certificates, service):
    with open_channel(tls_address, files(certificates, "w0")) as channel:
        stub = pb_grpc.ControllerStub(with_token(channel, GRPC_TOKEN))
        stub.StandBy(pb.StandbyReport(worker_id="w0", host="c0ffee", pid=7, state=pb.STANDBY_STATE_READY),
                     timeout=5)
        with pytest.raises(grpc.RpcError) as refused:
            stub.StandBy(pb.StandbyReport(worker_id="w1", host="beef", pid=7, state=pb.STANDBY_STATE_READY),
                         timeout=5)
    assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert [s.host for s in service.status().standbys] == ["c0ffee"]


def test_the_worker_client_checks_the_controllers_certificate(tls_address, certificates, caplog):
    # The right CA: registered. A CA that did not sign the controller's: no
    # connection, retried, and the warning says why (not just UNAVAILABLE).
    client = ControllerClient(tls_address, WorkerIdentity("w0", 0, 2, "fp", ()), timeout_s=5, token=GRPC_TOKEN,
                              tls=files(certificates, "w0"))
    assert client.register(threading.Event(), wait=lambda _: False).session_id
    client.close()
    stranger = ControllerClient(tls_address, WorkerIdentity("w0", 0, 2, "fp", ()), timeout_s=5, token=GRPC_TOKEN,
                                tls=files(certificates, "w0", certificates / "other" / "ca.crt"))
    with pytest.raises(grpc.RpcError) as refused:
        stranger.register_once()
    assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
    stop = threading.Event()
    with caplog.at_level(logging.WARNING, logger="sparkpoint.worker.control"):
        assert stranger.register(stop, wait=lambda _: stop.set() or True) is None
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"controller at {tls_address} unreachable (UNAVAILABLE: " in warning
    assert "Tls handshake failed" in warning and "CERTIFICATE_VERIFY_FAILED" in warning, warning
    stranger.close()


def test_a_worker_whose_certificate_is_anothers_is_refused_for_good(tls_address, certificates):
    client = ControllerClient(tls_address, WorkerIdentity("w1", 1, 2, "fp", ()), timeout_s=5, token=GRPC_TOKEN,
                              tls=files(certificates, "w0"))
    with pytest.raises(RegistrationRefused, match="not for worker 'w1'"):
        client.register(threading.Event(), wait=lambda _: False)
    client.close()


# --- settings ----------------------------------------------------------------------------------

def tls_env(directory: Path, name: str) -> dict[str, str]:
    return {"SP_GRPC_TLS_CERT_FILE": str(directory / f"{name}.crt"),
            "SP_GRPC_TLS_KEY_FILE": str(directory / f"{name}.key"),
            "SP_GRPC_TLS_CA_FILE": str(directory / "ca.crt")}


def test_the_controller_and_the_worker_read_the_three_files(certificates):
    controller = ControllerSettings.from_env({"SP_API_AUTH": "none", "SP_GRPC_AUTH": "none",
                                              **tls_env(certificates, "controller")})
    assert controller.grpc_tls == files(certificates, "controller")
    assert WorkerSettings.from_env(tls_env(certificates, "w0")).grpc_tls == files(certificates, "w0")
    assert WorkerSettings.from_env({}).grpc_tls is None


@pytest.mark.parametrize("drop, swap, variable, needle", [
    ("SP_GRPC_TLS_KEY_FILE", None, "SP_GRPC_TLS_KEY_FILE", "is required with SP_GRPC_TLS_CERT_FILE, "
                                                           "SP_GRPC_TLS_CA_FILE"),
    ("SP_GRPC_TLS_CA_FILE", None, "SP_GRPC_TLS_CA_FILE", "is required with"),
    (None, ("SP_GRPC_TLS_CERT_FILE", "w0.key"), "SP_GRPC_TLS_CERT_FILE", "holds no PEM certificate"),
    (None, ("SP_GRPC_TLS_KEY_FILE", "w0.crt"), "SP_GRPC_TLS_KEY_FILE", "holds no PEM private key"),
    (None, ("SP_GRPC_TLS_CA_FILE", "missing.crt"), "SP_GRPC_TLS_CA_FILE", "cannot read"),
])
def test_bad_tls_settings_name_the_variable(certificates, drop, swap, variable, needle):
    env = tls_env(certificates, "w0")
    if drop:
        del env[drop]
    if swap:
        env[swap[0]] = str(certificates / swap[1])
    with pytest.raises(SettingsError) as raised:
        WorkerSettings.from_env(env)
    assert raised.value.variable == variable and needle in str(raised.value)


def test_the_controller_checks_its_tls_files_in_full_too(certificates):
    env = {"SP_API_AUTH": "none", "SP_GRPC_AUTH": "none", **tls_env(certificates, "controller")}
    del env["SP_GRPC_TLS_CA_FILE"]
    with pytest.raises(SettingsError) as raised:
        ControllerSettings.from_env(env)
    assert raised.value.variable == "SP_GRPC_TLS_CA_FILE" and "is required with" in str(raised.value)
