"""Issue 15, containers: docker-compose.yml as written (the stack itself is
checked by ``make up`` and the chaos tests): no known default secret, every
service hardened and limited, the networks separated; and the secrets
``make up`` generates."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sparkpoint.secrets import UnsafeSecretsDirectory, read_secret
from sparkpoint.stack_secrets import CERTIFICATES, COMPOSE_SECRETS, ensure_compose_secrets

REPO = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
WORKERS = ("worker-0", "worker-1", "standby")      # every container that runs a worker index
# The kafka profile's file, on top of docker-compose.yml (make up PROFILE=kafka).
KAFKA = yaml.safe_load((REPO / "docker" / "compose.kafka.yml").read_text())
KAFKA_SERVICES = ("kafka", "kafka-producer")        # the services it adds


def test_no_password_or_token_is_written_in_the_file():
    text = (REPO / "docker-compose.yml").read_text()
    assert "POSTGRES_PASSWORD:" not in text and "SP_PG_PASSWORD:" not in text
    assert {name: spec["file"] for name, spec in COMPOSE["secrets"].items()} == {
        "api_token": "${SP_SECRETS_DIR:-./.secrets}/api-token",
        "grpc_token": "${SP_SECRETS_DIR:-./.secrets}/grpc-token",
        "postgres_password": "${SP_SECRETS_DIR:-./.secrets}/postgres-password",
        "postgres_reader_password": "${SP_SECRETS_DIR:-./.secrets}/postgres-reader-password",
        "ca_cert": "${SP_SECRETS_DIR:-./.secrets}/ca.crt",
        "postgres_tls_cert": "${SP_SECRETS_DIR:-./.secrets}/postgres.crt",
        "postgres_tls_key": "${SP_SECRETS_DIR:-./.secrets}/postgres.key",
        **{f"{name.replace('-', '_')}_tls_{kind}": f"${{SP_SECRETS_DIR:-./.secrets}}/{name}.{ext}"
           for name in ("controller", "worker-0", "worker-1") for kind, ext in (("cert", "crt"), ("key", "key"))}}
    assert SERVICES["postgres"]["environment"]["POSTGRES_PASSWORD_FILE"] == "/run/secrets/postgres_password"
    # The read-only role's password goes to the database alone: no service of the stack writes with it or needs it.
    assert SERVICES["postgres"]["environment"]["POSTGRES_READER_PASSWORD_FILE"] == \
        "/run/secrets/postgres_reader_password"
    assert [name for name, spec in SERVICES.items() if "postgres_reader_password" in spec.get("secrets", [])] == \
        ["postgres"]
    controller = SERVICES["controller"]["environment"]
    assert (controller["SP_API_TOKEN_FILE"], controller["SP_GRPC_TOKEN_FILE"]) == (
        "/run/secrets/api_token", "/run/secrets/grpc_token")
    for worker in WORKERS:
        env = SERVICES[worker]["environment"]
        assert (env["SP_GRPC_TOKEN_FILE"], env["SP_PG_PASSWORD_FILE"]) == (
            "/run/secrets/grpc_token", "/run/secrets/postgres_password")
        # Any worker container may take over any index: it holds every worker's certificate.
        assert set(SERVICES[worker]["secrets"]) == {"grpc_token", "postgres_password", "ca_cert",
                                                    *(f"worker_{i}_tls_{kind}" for i in (0, 1)
                                                      for kind in ("cert", "key"))}
    assert "SP_API_AUTH" not in text and "SP_GRPC_AUTH" not in text


@pytest.mark.parametrize("service", sorted(SERVICES) + sorted(KAFKA_SERVICES))
def test_every_service_is_hardened_and_limited(service):
    spec = SERVICES.get(service) or KAFKA["services"][service]
    assert spec["cap_drop"] == ["ALL"] and "cap_add" not in spec
    assert spec["security_opt"] == ["no-new-privileges:true"]
    assert spec["read_only"] is True
    assert spec["logging"] == {"driver": "json-file", "options": {"max-size": "10m", "max-file": "3"}}
    assert spec["mem_limit"] and 0 < float(spec["cpus"]) <= 2 and 0 < spec["pids_limit"] <= 1024
    # A tmpfs is root's, 0755, unless told: the services run as other users.
    assert all("mode=1777" in mount for mount in spec.get("tmpfs", [])), spec.get("tmpfs")


def test_the_networks_are_separated():
    assert COMPOSE["networks"]["control"]["internal"] and COMPOSE["networks"]["data"]["internal"]
    assert SERVICES["producer"]["network_mode"] == "none"
    assert set(SERVICES["controller"]["networks"]) == {"front", "control"}
    assert set(SERVICES["postgres"]["networks"]) == {"data"}
    assert all(set(SERVICES[worker]["networks"]) == {"control", "data"} for worker in WORKERS)
    assert set(SERVICES["prometheus"]["networks"]) == {"front"}
    # Only the controller's REST port (and Prometheus') is published, on 127.0.0.1 by default.
    published = {name: spec.get("ports") for name, spec in SERVICES.items() if spec.get("ports")}
    assert published == {"controller": ["${SP_HTTP_BIND:-127.0.0.1}:${SP_HTTP_PUBLISH_PORT:-8080}:8080"],
                         "prometheus": ["${SP_HTTP_BIND:-127.0.0.1}:${SP_PROMETHEUS_PUBLISH_PORT:-9090}:9090"]}


def test_the_kafka_profile_adds_an_internal_network_of_the_broker_its_producer_and_the_workers_only():
    assert KAFKA["networks"]["kafka"]["internal"]
    assert set(KAFKA["services"]) == {*KAFKA_SERVICES, *WORKERS, "producer"}
    assert set(KAFKA["services"]["kafka"]["networks"]) == {"kafka"}
    assert set(KAFKA["services"]["kafka-producer"]["networks"]) == {"kafka"}
    assert all(set(KAFKA["services"][worker]["networks"]) == {"control", "data", "kafka"} for worker in WORKERS)
    assert KAFKA["services"]["producer"] == {"scale": 0}       # the log's producer does not run
    assert not any(spec.get("ports") for spec in KAFKA["services"].values())


def test_postgres_takes_tls_only_and_the_workers_verify_it():
    postgres = SERVICES["postgres"]
    assert set(postgres["secrets"]) == {"postgres_password", "postgres_reader_password", "postgres_tls_cert",
                                       "postgres_tls_key"}
    assert (postgres["environment"]["POSTGRES_TLS_CERT_FILE"], postgres["environment"]["POSTGRES_TLS_KEY_FILE"]) == (
        "/run/secrets/postgres_tls_cert", "/run/secrets/postgres_tls_key")
    for worker in WORKERS:
        env = SERVICES[worker]["environment"]
        assert (env["SP_PG_SSLMODE"], env["SP_PG_SSLROOTCERT"], env["SP_PG_HOST"]) == (
            "verify-full", "/run/secrets/ca_cert", "postgres")
    # The CA's key signs certificates: no service is given it.
    assert not any(spec["file"].endswith("ca.key") for spec in COMPOSE["secrets"].values())


def test_grpc_runs_over_mutual_tls_each_worker_index_with_its_own_certificate():
    controller = SERVICES["controller"]
    assert set(controller["secrets"]) == {"api_token", "grpc_token", "ca_cert", "controller_tls_cert",
                                          "controller_tls_key"}
    assert {key: value for key, value in controller["environment"].items() if key.startswith("SP_GRPC_TLS")} == {
        "SP_GRPC_TLS_CERT_FILE": "/run/secrets/controller_tls_cert",
        "SP_GRPC_TLS_KEY_FILE": "/run/secrets/controller_tls_key", "SP_GRPC_TLS_CA_FILE": "/run/secrets/ca_cert"}
    assert sorted(name for name in SERVICES if name.startswith("worker-")) == \
        sorted(name for name in CERTIFICATES if name.startswith("worker-"))
    for worker in WORKERS:
        environ = {key: str(value) for key, value in SERVICES[worker]["environment"].items()}
        for index in (0, 1):
            # The index a container runs picks its certificate, which names the worker id it registers with
            # (SP_WORKER_ID unset: worker-<index>), and the controller's service name.
            resolved = {key: value.replace("{index}", str(index)) for key, value in environ.items()}
            assert (resolved["SP_GRPC_TLS_CERT_FILE"], resolved["SP_GRPC_TLS_KEY_FILE"],
                    resolved["SP_GRPC_TLS_CA_FILE"]) == (f"/run/secrets/worker_{index}_tls_cert",
                                                         f"/run/secrets/worker_{index}_tls_key", "/run/secrets/ca_cert")
        assert "SP_WORKER_ID" not in environ
        assert environ["SP_CONTROLLER_ADDR"].split(":")[0] in CERTIFICATES["controller"]


def test_make_up_generates_random_secrets_once_out_of_reach(tmp_path):
    directory = tmp_path / ".secrets"
    made = ensure_compose_secrets(directory)
    assert [p.name for p in made] == [*COMPOSE_SECRETS, "ca.crt", *(f"{name}.{ext}" for name in CERTIFICATES
                                                                    for ext in ("crt", "key"))]
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    first = made[:len(COMPOSE_SECRETS)]
    values = [read_secret(p).value for p in first]
    assert len(set(values)) == len(COMPOSE_SECRETS) and all(len(v) >= 43 for v in values)      # 256 bits each
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o444 for p in made)
    assert stat.S_IMODE((directory / "ca.key").stat().st_mode) == 0o600
    certificates = [p.read_bytes() for p in made[len(COMPOSE_SECRETS):]]
    ensure_compose_secrets(directory)                                         # a second `make up`
    assert [read_secret(p).value for p in first] == values
    assert [p.read_bytes() for p in made[len(COMPOSE_SECRETS):]] == certificates
    assert ensure_compose_secrets(tmp_path / "other") and read_secret(tmp_path / "other" / "api-token").value \
        not in values


def test_the_secrets_are_kept_out_of_git_and_of_the_images():
    assert "/.secrets/" in (REPO / ".gitignore").read_text().splitlines()
    assert "!.secrets" not in (REPO / ".dockerignore").read_text()


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777])
def test_a_secrets_directory_others_can_write_is_refused_before_anything_is_written(tmp_path, mode):
    directory = tmp_path / ".secrets"
    directory.mkdir()
    directory.chmod(mode)
    with pytest.raises(UnsafeSecretsDirectory, match=rf"\.secrets: writable by others \(mode 0{mode:o}\).*chmod 700"):
        ensure_compose_secrets(directory)
    assert list(directory.iterdir()) == []
    directory.chmod(0o700)          # made private: used
    assert ensure_compose_secrets(directory)


def test_make_up_names_an_unsafe_secrets_directory_in_one_line(tmp_path):
    directory = tmp_path / ".secrets"
    directory.mkdir(mode=0o777)
    directory.chmod(0o777)
    done = subprocess.run([sys.executable, "-m", "sparkpoint.stack_secrets", str(directory)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and done.stderr.startswith("make up: ") and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
