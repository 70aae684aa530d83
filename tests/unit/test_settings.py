"""Settings on pydantic-settings (sparkpoint.settings and each program's class),
and the one-line error a service prints (exit status 2, no traceback) when a
setting is wrong."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict
from pydantic import ValidationError

from controller.settings import ControllerSettings
from sparkpoint.devstack import DevStackSettings
from sparkpoint.producer import ProducerSettings
from sparkpoint.settings import SettingsError
from sparkpoint_cli.settings import CliSettings
from worker import api as sp
from worker.api.loader import load_pipeline
from worker.publishing.sinks import check_sinks
from worker.runtime.queries import check_sources
from worker.runtime.ui import spark_ui_conf
from worker.settings import DEFAULT_JAVA_OPTIONS, WorkerSettings

REPO = Path(__file__).resolve().parents[2]
# The controller starts without authentication only when told so explicitly.
NO_AUTH = {"SP_API_AUTH": "none", "SP_GRPC_AUTH": "none"}


def settings_error(call, variable: str) -> SettingsError:
    with pytest.raises(SettingsError) as caught:
        call()
    assert caught.value.variable == variable
    assert str(caught.value).startswith(f"{variable}: ")
    assert "\n" not in str(caught.value) and "pydantic" not in str(caught.value)
    return caught.value


# --- how every class reads the environment -----------------------------------------

def test_blank_is_unset_and_values_are_stripped():
    assert WorkerSettings.from_env({"SP_CHECKPOINT_RETAIN": "   "}).checkpoint_retain == 3
    assert WorkerSettings.from_env({"SP_CHECKPOINT_RETAIN": ""}).checkpoint_retain == 3
    assert WorkerSettings.from_env({"SP_CHECKPOINT_RETAIN": " 12 "}).checkpoint_retain == 12
    assert WorkerSettings.from_env({"SP_WORKER_ID": " alpha "}).worker_id == "alpha"


def test_only_the_given_mapping_is_read(monkeypatch):
    monkeypatch.setenv("SP_CHECKPOINT_RETAIN", "9")
    assert WorkerSettings.from_env({}).checkpoint_retain == 3


def test_variables_are_upper_case_with_the_prefix():
    assert WorkerSettings.from_env({"CHECKPOINT_RETAIN": "9", "SP_OTHER": "x"}).checkpoint_retain == 3
    assert WorkerSettings.variable("checkpoint_retain") == "SP_CHECKPOINT_RETAIN"
    assert WorkerSettings.variable("checkpoint_freq_ms") == "SP_CHECKPOINT_FREQ"


def test_settings_are_frozen():
    settings = WorkerSettings.from_env({})
    with pytest.raises(ValidationError):
        settings.worker_id = "other"


def test_integer_bounds_are_inclusive():
    assert WorkerSettings.from_env({"SP_REPORT_INTERVAL": "50"}).report_interval_ms == 50
    error = settings_error(lambda: WorkerSettings.from_env({"SP_REPORT_INTERVAL": "49"}), "SP_REPORT_INTERVAL")
    assert str(error) == "SP_REPORT_INTERVAL: must be at least 50, got 49"
    assert ProducerSettings.from_env({"SP_PRODUCER_PARTITIONS": "1024"}).partitions == 1024
    error = settings_error(lambda: ProducerSettings.from_env({"SP_PRODUCER_PARTITIONS": "1025"}),
                           "SP_PRODUCER_PARTITIONS")
    assert str(error) == "SP_PRODUCER_PARTITIONS: must be at most 1024, got 1025"


@pytest.mark.parametrize("value", ["abc", "1.5", "1e3"])
def test_integer_not_a_number_names_value_and_unit(value):
    error = settings_error(lambda: WorkerSettings.from_env({"SP_CHECKPOINT_FREQ": value}), "SP_CHECKPOINT_FREQ")
    assert str(error) == f"SP_CHECKPOINT_FREQ: expected an integer (milliseconds), got {value!r}"


def test_integer_without_a_unit():
    error = settings_error(lambda: WorkerSettings.from_env({"SP_SHUFFLE_PARTITIONS": "two"}), "SP_SHUFFLE_PARTITIONS")
    assert str(error) == "SP_SHUFFLE_PARTITIONS: expected an integer, got 'two'"


@pytest.mark.parametrize("text, expected", [
    ("1", True), ("true", True), ("YES", True), ("On", True),
    ("0", False), ("false", False), ("no", False), ("OFF", False),
])
def test_boolean_accepted_spellings(text, expected):
    assert WorkerSettings.from_env({"SP_FORCE_GRAPH_CHANGE": text}).force_graph_change is expected
    assert CliSettings.from_env({"SP_FORCE_GRAPH_CHANGE": text}).force_graph_change is expected


def test_boolean_default_and_bad_value():
    assert WorkerSettings.from_env({}).force_graph_change is False
    error = settings_error(lambda: WorkerSettings.from_env({"SP_FORCE_GRAPH_CHANGE": "maybe"}),
                           "SP_FORCE_GRAPH_CHANGE")
    assert str(error) == "SP_FORCE_GRAPH_CHANGE: expected true or false, got 'maybe'"


@pytest.mark.parametrize("value", ["localhost:50051", "10.0.0.1:1", "host:65535", "[::1]:8080"])
def test_address_valid(value):
    assert WorkerSettings.from_env({"SP_CONTROLLER_ADDR": value}).controller_addr == value


@pytest.mark.parametrize("value", ["localhost", ":50051", "host:", "host:0", "host:65536", "host:abc"])
def test_address_invalid(value):
    error = settings_error(lambda: WorkerSettings.from_env({"SP_CONTROLLER_ADDR": value}), "SP_CONTROLLER_ADDR")
    assert str(error) == f"SP_CONTROLLER_ADDR: expected host:port, got {value!r}"


def test_port_bounds():
    assert ControllerSettings.from_env({**NO_AUTH, "SP_CONTROLLER_GRPC_PORT": "65535"}).grpc_port == 65535
    assert ControllerSettings.from_env({**NO_AUTH, "SP_CONTROLLER_GRPC_PORT": "1"}).grpc_port == 1
    settings_error(lambda: ControllerSettings.from_env({**NO_AUTH, "SP_CONTROLLER_GRPC_PORT": "0"}), "SP_CONTROLLER_GRPC_PORT")
    settings_error(lambda: ControllerSettings.from_env({**NO_AUTH, "SP_CONTROLLER_GRPC_PORT": "65536"}),
                   "SP_CONTROLLER_GRPC_PORT")


def test_paths_expand_the_home_directory():
    assert WorkerSettings.from_env({"SP_LOG_DIR": "~/log"}).log_dir == Path.home() / "log"


# --- WorkerSettings ----------------------------------------------------------

def test_worker_defaults():
    s = WorkerSettings.from_env({})
    assert s.pipeline == Path("pipelines/trades.py")
    assert (s.worker_index, s.worker_count, s.worker_id) == (0, 1, "worker-0")
    assert s.controller_addr == "localhost:50051"
    assert s.work_dir == Path("var/work/worker-0")
    assert s.log_dir == Path("var/log") and s.output_dir == Path("var/output")
    assert s.spark_master == "local[2,4]"
    assert s.shuffle_partitions == 1
    assert s.max_records_per_batch == 1_000_000
    assert s.checkpoint_freq_ms == 1000
    assert s.trigger_interval_ms == 1000 and s.upsert_trigger_interval_ms == 500 and s.report_interval_ms == 1000


def test_worker_id_and_work_dir_follow_index():
    s = WorkerSettings.from_env({"SP_WORKER_COUNT": "3", "SP_WORKER_INDEX": "2"})
    assert s.worker_id == "worker-2"
    assert s.work_dir == Path("var/work/worker-2")
    s = WorkerSettings.from_env({"SP_WORKER_ID": "alpha"})
    assert s.work_dir == Path("var/work/alpha")


def test_worker_index_must_be_below_count():
    error = settings_error(
        lambda: WorkerSettings.from_env({"SP_WORKER_COUNT": "2", "SP_WORKER_INDEX": "2"}), "SP_WORKER_INDEX")
    assert "SP_WORKER_COUNT" in str(error)
    settings_error(lambda: WorkerSettings.from_env({"SP_WORKER_INDEX": "-1"}), "SP_WORKER_INDEX")


@pytest.mark.parametrize("variable, value", [
    ("SP_WORKER_COUNT", "abc"),
    ("SP_WORKER_COUNT", "0"),
    ("SP_WORKER_COUNT", "1025"),
    ("SP_CONTROLLER_ADDR", "controller"),
    ("SP_SHUFFLE_PARTITIONS", "0"),
    ("SP_TRIGGER_INTERVAL", "abc"),
    ("SP_TRIGGER_INTERVAL", "-1"),
    ("SP_REPORT_INTERVAL", "49"),
    ("SP_MAX_RECORDS_PER_BATCH", "-5"),
    ("SP_SPARK_UI_PORT", "0"),
    ("SP_SPARK_UI_PORT", "ui"),
    ("SP_WORKER_ID", "../worker-0"),
    ("SP_WORKER_ID", "w" * 65),
    ("SP_JAVA_OPTIONS", "-Dname='unclosed"),
])
def test_worker_bad_values_name_the_variable(variable, value):
    settings_error(lambda: WorkerSettings.from_env({variable: value}), variable)


def test_sparks_ui_is_off_unless_a_port_is_given():
    assert spark_ui_conf(WorkerSettings.from_env({}).spark_ui_port)["spark.ui.enabled"] == "false"
    assert spark_ui_conf(WorkerSettings.from_env({"SP_SPARK_UI_PORT": "4040"}).spark_ui_port) == {
        "spark.ui.enabled": "true", "spark.ui.port": "4040"}


def test_worker_max_records_zero_means_no_cap():
    assert WorkerSettings.from_env({"SP_MAX_RECORDS_PER_BATCH": "0"}).max_records_per_batch == 0


def test_postgres_is_not_configured_by_default():
    assert WorkerSettings.from_env({}).postgres is None


def test_postgres_from_its_parts_with_defaults():
    conninfo = conninfo_to_dict(WorkerSettings.from_env({"SP_PG_HOST": "db", "SP_PG_PASSWORD": "s3cret"}).postgres)
    assert conninfo == {"host": "db", "port": "5432", "dbname": "sparkpoint", "user": "sparkpoint",
                        "password": "s3cret"}


def test_postgres_password_from_a_file(tmp_path):
    (tmp_path / "pg").write_text("fr0m-a-file\n")
    settings = WorkerSettings.from_env({"SP_PG_HOST": "db", "SP_PG_PASSWORD_FILE": str(tmp_path / "pg")})
    assert conninfo_to_dict(settings.postgres)["password"] == "fr0m-a-file"
    assert "fr0m-a-file" not in repr(settings)
    with pytest.raises(SettingsError, match="SP_PG_PASSWORD_FILE: set either"):
        WorkerSettings.from_env({"SP_PG_HOST": "db", "SP_PG_PASSWORD": "x", "SP_PG_PASSWORD_FILE": str(tmp_path / "pg")})
    with pytest.raises(SettingsError, match="SP_PG_HOST: is required with SP_PG_PASSWORD_FILE"):
        WorkerSettings.from_env({"SP_PG_PASSWORD_FILE": str(tmp_path / "pg")})


def test_postgres_from_a_dsn():
    dsn = "postgresql://u@db:6543/events"
    assert WorkerSettings.from_env({"SP_PG_DSN": dsn}).postgres == dsn


def test_postgres_parts_given_in_full():
    settings = WorkerSettings.from_env({"SP_PG_HOST": "db", "SP_PG_PORT": "6543", "SP_PG_DATABASE": "events",
                                        "SP_PG_USER": "u"})
    assert conninfo_to_dict(settings.postgres) == {"host": "db", "port": "6543", "dbname": "events", "user": "u"}


def test_postgres_over_tls_verifying_the_server(tmp_path):
    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    settings = WorkerSettings.from_env({"SP_PG_HOST": "db", "SP_PG_SSLMODE": "verify-full",
                                        "SP_PG_SSLROOTCERT": str(ca)})
    conninfo = conninfo_to_dict(settings.postgres)
    assert (conninfo["sslmode"], conninfo["sslrootcert"]) == ("verify-full", str(ca))


@pytest.mark.parametrize("env, variable, needle", [
    ({"SP_PG_HOST": "db", "SP_PG_SSLMODE": "verify-full"}, "SP_PG_SSLROOTCERT",
     "is required with SP_PG_SSLMODE=verify-full"),
    ({"SP_PG_HOST": "db", "SP_PG_SSLMODE": "on"}, "SP_PG_SSLMODE", "'verify-full'"),
    ({"SP_PG_HOST": "db", "SP_PG_SSLROOTCERT": "/nonexistent/ca.crt"}, "SP_PG_SSLROOTCERT",
     "cannot read /nonexistent/ca.crt"),
    ({"SP_PG_HOST": "db", "SP_PG_SSLROOTCERT": str(REPO / "pyproject.toml")}, "SP_PG_SSLROOTCERT",
     "holds no PEM certificate"),
    ({"SP_PG_DSN": "host=db", "SP_PG_SSLMODE": "require"}, "SP_PG_DSN", "not both"),
])
def test_postgres_tls_bad_settings_name_the_variable(env, variable, needle):
    assert needle in str(settings_error(lambda: WorkerSettings.from_env(env), variable))


def test_the_postgres_password_is_not_shown():
    settings = WorkerSettings.from_env({"SP_PG_HOST": "db", "SP_PG_PASSWORD": "s3cret"})
    assert "s3cret" not in repr(settings)


@pytest.mark.parametrize("env, variable, needle", [
    ({"SP_PG_DSN": "host=db", "SP_PG_HOST": "db"}, "SP_PG_DSN", "set either SP_PG_DSN or SP_PG_HOST, not both"),
    ({"SP_PG_DSN": "host=db", "SP_PG_USER": "u"}, "SP_PG_DSN", "set either SP_PG_DSN or SP_PG_USER, not both"),
    ({"SP_PG_DSN": "nonsense"}, "SP_PG_DSN", "not a valid PostgreSQL connection string"),
    ({"SP_PG_PORT": "5433"}, "SP_PG_HOST", "is required with SP_PG_PORT"),
    ({"SP_PG_HOST": "db", "SP_PG_PORT": "http"}, "SP_PG_PORT", "'http'"),
    ({"SP_PG_HOST": "db", "SP_PG_PORT": "0"}, "SP_PG_PORT", "at least 1"),
])
def test_postgres_bad_settings_name_the_variable(env, variable, needle):
    assert needle in str(settings_error(lambda: WorkerSettings.from_env(env), variable))


POSTGRES_PIPELINE = REPO / "pipelines" / "trades_postgres.py"


def test_a_postgres_sink_needs_connection_settings():
    settings = WorkerSettings.from_env({})
    error = settings_error(lambda: check_sinks(load_pipeline(POSTGRES_PIPELINE), settings), "SP_PG_HOST")
    assert "enriched_pg" in str(error)


def test_a_transactional_postgres_sink_needs_checkpoints():
    settings = WorkerSettings.from_env({"SP_PG_HOST": "db", "SP_CHECKPOINT_FREQ": "0"})
    error = settings_error(lambda: check_sinks(load_pipeline(POSTGRES_PIPELINE), settings), "SP_CHECKPOINT_FREQ")
    assert "enriched_pg" in str(error) and "trades_enriched" in str(error)


def test_files_and_upserts_run_with_checkpoints_off():
    pipeline = sp.run(sp.read.from_log("t", schema="k string, n long")
                      | sp.write.to_postgres("t", key="k", version="n", name="up"),
                      sp.read.from_log("t", schema="k string, n long") | sp.write.to_files("out"))
    check_sinks(pipeline, WorkerSettings.from_env({"SP_PG_HOST": "db", "SP_CHECKPOINT_FREQ": "0"}))


KAFKA_PIPELINE = REPO / "pipelines" / "trades_kafka.py"


def test_kafka_is_not_configured_by_default_and_a_kafka_source_needs_it():
    settings = WorkerSettings.from_env({})
    assert settings.kafka is None
    error = settings_error(lambda: check_sources(load_pipeline(KAFKA_PIPELINE), settings), "SP_KAFKA_BOOTSTRAP")
    assert "source trades reads Kafka topic(s) trades" in str(error)


def test_a_reference_table_needs_postgres():
    table = sp.read.table_from_postgres("symbols", schema="sym string, sector string")
    pipeline = sp.run(sp.read.from_log("t", schema="sym string") | sp.join(table, on="sym", name="sectors")
                      | sp.write.to_console(name="out"))
    error = settings_error(lambda: check_sources(pipeline, WorkerSettings.from_env({})), "SP_PG_HOST")
    assert "node sectors joins the PostgreSQL table symbols" in str(error)
    check_sources(pipeline, WorkerSettings.from_env({"SP_PG_HOST": "db"}))


def test_a_kafka_sink_needs_brokers_and_checkpoints_and_a_transaction_timeout_beyond_a_take_over():
    pipeline = sp.run(sp.read.from_log("t", schema="sym string") | sp.write.to_kafka("out", name="enriched_kafka"))
    error = settings_error(lambda: check_sinks(pipeline, WorkerSettings.from_env({})), "SP_KAFKA_BOOTSTRAP")
    assert "sink enriched_kafka writes to Kafka topic out" in str(error)
    kafka = {"SP_KAFKA_BOOTSTRAP": "k:9092"}
    error = settings_error(lambda: check_sinks(pipeline, WorkerSettings.from_env({**kafka, "SP_CHECKPOINT_FREQ": "0"})),
                           "SP_CHECKPOINT_FREQ")
    assert "enriched_kafka" in str(error)
    check_sinks(pipeline, WorkerSettings.from_env(kafka))      # librdkafka's 60 s against 2 x (1 s + 10 s)
    short = {**kafka, "SP_CHECKPOINT_FREQ": "5000", "SP_HEARTBEAT_TIMEOUT": "30000"}
    error = settings_error(lambda: check_sinks(pipeline, WorkerSettings.from_env(short)), "SP_KAFKA_CONFIG")
    assert "transaction.timeout.ms is 60000, too short for sink enriched_kafka" in str(error)
    assert "at least 70000" in str(error)
    check_sinks(pipeline, WorkerSettings.from_env({**short, "SP_KAFKA_CONFIG": '{"transaction.timeout.ms": 70000}'}))
    error = settings_error(lambda: check_sinks(pipeline, WorkerSettings.from_env(
        {**kafka, "SP_KAFKA_CONFIG": '{"transaction.timeout.ms": "a minute"}'})), "SP_KAFKA_CONFIG")
    assert "transaction.timeout.ms is a whole number of milliseconds, got 'a minute'" in str(error)


def test_kafka_properties_pass_through_and_secrets_come_from_files(tmp_path):
    password = tmp_path / "kafka-password"
    password.write_text("s3cret\n")
    settings = WorkerSettings.from_env({
        "SP_KAFKA_BOOTSTRAP": "k1:9092,k2:9092",
        "SP_KAFKA_CONFIG": '{"security.protocol": "SASL_SSL", "sasl.username": "reader", "fetch.wait.max.ms": 50, '
                           '"check.crcs": true}',
        "SP_KAFKA_CONFIG_FILES": f'{{"sasl.password": "{password}"}}'})
    assert settings.kafka == ({"bootstrap.servers": "k1:9092,k2:9092", "security.protocol": "SASL_SSL",
                               "sasl.username": "reader", "fetch.wait.max.ms": "50", "check.crcs": "true"},
                              {"sasl.password": str(password)})
    check_sources(load_pipeline(KAFKA_PIPELINE), settings)
    assert "s3cret" not in repr(settings)


@pytest.mark.parametrize("env, variable, needle", [
    ({"SP_KAFKA_CONFIG": '{"sasl.password": "x"}'}, "SP_KAFKA_CONFIG", "is a secret: give it in SP_KAFKA_CONFIG_FILES"),
    ({"SP_KAFKA_CONFIG": '{"group.id": "mine"}'}, "SP_KAFKA_CONFIG", "group.id is set by Sparkpoint"),
    ({"SP_KAFKA_CONFIG": '{"bootstrap.servers": "k:1"}'}, "SP_KAFKA_CONFIG", "SP_KAFKA_BOOTSTRAP"),
    ({"SP_KAFKA_CONFIG": '{"auto.offset.reset": "latest"}'}, "SP_KAFKA_CONFIG", "fail_on_data_loss"),
    ({"SP_KAFKA_CONFIG": '{"transactional.id": "mine"}'}, "SP_KAFKA_CONFIG", "one per worker index and sink"),
    ({"SP_KAFKA_CONFIG": '{"Not A Property": "x"}'}, "SP_KAFKA_CONFIG", "is not a librdkafka property name"),
    ({"SP_KAFKA_CONFIG": "security.protocol=SSL"}, "SP_KAFKA_CONFIG", "expected a JSON object of strings, numbers"),
    ({"SP_KAFKA_CONFIG": '{"ssl": {"ca": "x"}}'}, "SP_KAFKA_CONFIG", "expected a JSON object of strings, numbers"),
    ({"SP_KAFKA_CONFIG_FILES": '{"sasl.password": "/nonexistent/kafka-password"}'}, "SP_KAFKA_CONFIG_FILES",
     "cannot read the secret file /nonexistent/kafka-password"),
])
def test_kafka_bad_settings_name_the_variable(env, variable, needle):
    assert needle in str(settings_error(lambda: WorkerSettings.from_env(env), variable))


# --- ControllerSettings -------------------------------------------------------

def test_controller_defaults():
    s = ControllerSettings.from_env(NO_AUTH)
    assert (s.bind, s.grpc_port, s.http_port, s.worker_count) == ("127.0.0.1", 50051, 8080, 1)


@pytest.mark.parametrize("variable, value", [
    ("SP_CONTROLLER_GRPC_PORT", "0"),
    ("SP_CONTROLLER_HTTP_PORT", "99999"),
    ("SP_CONTROLLER_HTTP_PORT", "http"),
    ("SP_WORKER_COUNT", "0"),
])
def test_controller_bad_values_name_the_variable(variable, value):
    settings_error(lambda: ControllerSettings.from_env({**NO_AUTH, variable: value}), variable)


# --- ProducerSettings, CliSettings, DevStackSettings -----------------------------

def test_producer_defaults():
    s = ProducerSettings.from_env({})
    assert (s.log_dir, s.log_name, s.partitions, s.rate, s.count, s.seed, s.health_max_age_s) == \
        (Path("var/log"), "trades", 4, 200, 0, 1, 30)


@pytest.mark.parametrize("variable, value, message", [
    ("SP_PRODUCER_RATE", "fast", "expected an integer (events per second), got 'fast'"),
    ("SP_PRODUCER_RATE", "0", "must be at least 1, got 0"),
    ("SP_PRODUCER_COUNT", "-1", "must be at least 0, got -1"),
    ("SP_PRODUCER_PARTITIONS", "0", "must be at least 1, got 0"),
    ("SP_HEALTH_MAX_AGE", "soon", "expected an integer (seconds), got 'soon'"),
])
def test_producer_bad_values_name_the_variable(variable, value, message):
    assert str(settings_error(lambda: ProducerSettings.from_env({variable: value}), variable)) == \
        f"{variable}: {message}"


def test_cli_defaults():
    s = CliSettings.from_env({})
    assert (s.controller_url, s.force_graph_change) == ("http://localhost:8080", False)
    assert CliSettings.from_env({"SP_CONTROLLER_URL": "http://c:1"}).controller_url == "http://c:1"


def test_make_run_defaults_and_bounds():
    s = DevStackSettings.from_env({})
    assert (s.root, s.workers, s.grpc_port, s.http_port) == (Path("var"), 2, 50051, 8080)
    assert DevStackSettings.from_env({"SP_DEV_ROOT": "/tmp/stack"}).root == Path("/tmp/stack")
    settings_error(lambda: DevStackSettings.from_env({"SP_WORKER_COUNT": "65"}), "SP_WORKER_COUNT")


# --- the services' command lines ---------------------------------------------

def run_module(module: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("SP_")}
    environ.update(env)
    return subprocess.run([sys.executable, "-m", module], cwd=REPO, env=environ,
                          capture_output=True, text=True, timeout=60)


def assert_one_line_error(result: subprocess.CompletedProcess, *needles: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0]


def test_worker_cli_bad_integer():
    assert_one_line_error(run_module("worker", SP_WORKER_COUNT="abc"), "SP_WORKER_COUNT", "'abc'")


def test_worker_cli_error_is_exactly_one_line():
    result = run_module("worker", SP_CHECKPOINT_FREQ="abc")
    assert (result.returncode, result.stdout, result.stderr) == \
        (2, "", "sparkpoint-worker: error: SP_CHECKPOINT_FREQ: expected an integer (milliseconds), got 'abc'\n")


def test_worker_cli_index_not_below_count():
    assert_one_line_error(run_module("worker", SP_WORKER_COUNT="2", SP_WORKER_INDEX="2"),
                          "SP_WORKER_INDEX: must be below SP_WORKER_COUNT (2), got 2")


def test_producer_cli_bad_rate():
    assert_one_line_error(run_module("sparkpoint.producer", SP_PRODUCER_RATE="fast"),
                          "sparkpoint-producer: error: SP_PRODUCER_RATE: expected an integer")


def test_make_run_bad_port():
    assert_one_line_error(run_module("sparkpoint.devstack", SP_CONTROLLER_HTTP_PORT="web"),
                          "make run: error: SP_CONTROLLER_HTTP_PORT: expected an integer, got 'web'")


def test_controller_cli_bad_port():
    assert_one_line_error(run_module("controller", SP_CONTROLLER_HTTP_PORT="99999"),
                          "SP_CONTROLLER_HTTP_PORT", "99999")


def own_dirs(tmp_path) -> dict[str, str]:
    """A worker fences its checkpoint directory before it loads the pipeline: its own."""
    return {"SP_CHECKPOINT_DIR": str(tmp_path / "checkpoints"), "SP_WORK_DIR": str(tmp_path / "work")}


def test_worker_cli_refuses_a_transactional_postgres_sink_without_checkpoints(tmp_path):
    assert_one_line_error(run_module("worker", SP_PIPELINE=str(POSTGRES_PIPELINE), SP_PG_HOST="db",
                                     SP_CHECKPOINT_FREQ="0", **own_dirs(tmp_path)), "SP_CHECKPOINT_FREQ", "enriched_pg")


def test_worker_cli_missing_pipeline_file(tmp_path):
    assert_one_line_error(run_module("worker", SP_PIPELINE="/nonexistent/p.py", **own_dirs(tmp_path)),
                          "/nonexistent/p.py")


def test_the_workers_jvm_options_follow_the_class_archives(monkeypatch, tmp_path):
    from worker.runtime import session

    archive = tmp_path / "spark-classes.jsa"
    monkeypatch.setattr(session, "CLASS_ARCHIVE", archive)
    settings = WorkerSettings.from_env({"SP_JAVA_OPTIONS": "-XX:TieredStopAtLevel=1 -Dx='a b'"})
    assert session.driver_java_options(settings) == "-XX:TieredStopAtLevel=1 -Dx='a b'"
    archive.write_bytes(b"")
    assert session.driver_java_options(settings) == f"-XX:SharedArchiveFile={archive} -XX:TieredStopAtLevel=1 -Dx='a b'"
    assert session.driver_java_options(WorkerSettings.from_env({})) == \
        f"-XX:SharedArchiveFile={archive} {DEFAULT_JAVA_OPTIONS}"
    assert session.driver_java_options(WorkerSettings.from_env({"SP_JAVA_OPTIONS": "-XX:TieredStopAtLevel=4"})) == \
        f"-XX:SharedArchiveFile={archive} -XX:TieredStopAtLevel=4"


def test_a_worker_that_may_take_over_any_index_checks_every_index_settings_at_start(tmp_path):
    for name, marker in (("ca.crt", "CERTIFICATE"), ("w0.crt", "CERTIFICATE"), ("w0.key", "PRIVATE KEY")):
        (tmp_path / name).write_text(f"-----BEGIN {marker}-----\n")
    result = run_module("worker", SP_WORKER_COUNT="2", SP_CHECKPOINT_DIR=str(tmp_path / "c{index}"),
                        SP_GRPC_TLS_CERT_FILE=str(tmp_path / "w{index}.crt"),
                        SP_GRPC_TLS_KEY_FILE=str(tmp_path / "w{index}.key"), SP_GRPC_TLS_CA_FILE=str(tmp_path / "ca.crt"))
    assert_one_line_error(result, "SP_GRPC_TLS_CERT_FILE", str(tmp_path / "w1.crt"))
