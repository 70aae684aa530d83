"""Typed settings: Env, WorkerSettings and ControllerSettings, and the one-line
error a service prints (exit status 2, no traceback) when a setting is wrong."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict

from controller.settings import ControllerSettings
from sparkpoint.env import Env, SettingsError
from worker import api as sp
from worker.api.loader import load_pipeline
from worker.publishing.sinks import check_sinks
from worker.settings import WorkerSettings

REPO = Path(__file__).resolve().parents[2]


def settings_error(call, variable: str) -> SettingsError:
    with pytest.raises(SettingsError) as caught:
        call()
    assert caught.value.variable == variable
    assert str(caught.value).startswith(f"{variable}: ")
    return caught.value


# --- Env -------------------------------------------------------------------

def test_integer_default_when_unset_or_blank():
    assert Env({}).integer("N", 7) == 7
    assert Env({"N": "   "}).integer("N", 7) == 7
    assert Env({"N": " 12 "}).integer("N", 7) == 12


def test_integer_bounds_are_inclusive():
    env = Env({"LO": "1", "HI": "10"})
    assert env.integer("LO", 0, minimum=1, maximum=10) == 1
    assert env.integer("HI", 0, minimum=1, maximum=10) == 10
    error = settings_error(lambda: Env({"N": "0"}).integer("N", 5, minimum=1), "N")
    assert "at least 1" in str(error) and "got 0" in str(error)
    error = settings_error(lambda: Env({"N": "11"}).integer("N", 5, maximum=10), "N")
    assert "at most 10" in str(error) and "got 11" in str(error)


def test_integer_not_a_number_names_value_and_unit():
    error = settings_error(lambda: Env({"N": "abc"}).integer("N", 5, unit="milliseconds"), "N")
    assert "'abc'" in str(error) and "milliseconds" in str(error)


@pytest.mark.parametrize("text, expected", [
    ("1", True), ("true", True), ("YES", True), ("On", True),
    ("0", False), ("false", False), ("no", False), ("OFF", False),
])
def test_boolean_accepted_spellings(text, expected):
    assert Env({"B": text}).boolean("B", not expected) is expected


def test_boolean_default_and_bad_value():
    assert Env({}).boolean("B", True) is True
    error = settings_error(lambda: Env({"B": "maybe"}).boolean("B", False), "B")
    assert "'maybe'" in str(error)


@pytest.mark.parametrize("value", ["localhost:50051", "10.0.0.1:1", "host:65535", "[::1]:8080"])
def test_address_valid(value):
    assert Env({"A": value}).address("A", "x:1") == value


@pytest.mark.parametrize("value", ["localhost", ":50051", "host:", "host:0", "host:65536", "host:abc"])
def test_address_invalid(value):
    error = settings_error(lambda: Env({"A": value}).address("A", "x:1"), "A")
    assert "host:port" in str(error) and repr(value) in str(error)


def test_required_string():
    assert Env({"S": " value "}).string("S") == "value"
    assert Env({}).string("S", "fallback") == "fallback"
    error = settings_error(lambda: Env({"S": ""}).string("S"), "S")
    assert "required" in str(error)


def test_port_bounds():
    assert Env({"P": "65535"}).port("P", 1) == 65535
    settings_error(lambda: Env({"P": "0"}).port("P", 1), "P")
    settings_error(lambda: Env({"P": "65536"}).port("P", 1), "P")


# --- WorkerSettings ----------------------------------------------------------

def test_worker_defaults():
    s = WorkerSettings.from_env({})
    assert s.pipeline == Path("pipelines/trades.py")
    assert (s.worker_index, s.worker_count, s.worker_id) == (0, 1, "worker-0")
    assert s.controller_addr == "localhost:50051"
    assert s.work_dir == Path("var/work/worker-0")
    assert s.log_dir == Path("var/log") and s.output_dir == Path("var/output")
    assert s.spark_master == "local[2,4]"
    assert s.shuffle_partitions == 2
    assert s.max_records_per_batch == 10_000
    assert s.trigger_interval_ms == 1000 and s.report_interval_ms == 1000


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
])
def test_worker_bad_values_name_the_variable(variable, value):
    settings_error(lambda: WorkerSettings.from_env({variable: value}), variable)


def test_worker_max_records_zero_means_no_cap():
    assert WorkerSettings.from_env({"SP_MAX_RECORDS_PER_BATCH": "0"}).max_records_per_batch == 0


def test_postgres_is_not_configured_by_default():
    assert WorkerSettings.from_env({}).postgres is None


def test_postgres_from_its_parts_with_defaults():
    conninfo = conninfo_to_dict(WorkerSettings.from_env({"SP_PG_HOST": "db", "SP_PG_PASSWORD": "s3cret"}).postgres)
    assert conninfo == {"host": "db", "port": "5432", "dbname": "sparkpoint", "user": "sparkpoint",
                        "password": "s3cret"}


def test_postgres_from_a_dsn():
    dsn = "postgresql://u@db:6543/events"
    assert WorkerSettings.from_env({"SP_PG_DSN": dsn}).postgres == dsn


@pytest.mark.parametrize("env, variable, needle", [
    ({"SP_PG_DSN": "host=db", "SP_PG_HOST": "db"}, "SP_PG_DSN", "not both"),
    ({"SP_PG_DSN": "nonsense"}, "SP_PG_DSN", "not a valid PostgreSQL connection string"),
    ({"SP_PG_PORT": "5433"}, "SP_PG_HOST", "required"),
    ({"SP_PG_HOST": "db", "SP_PG_PORT": "http"}, "SP_PG_PORT", "'http'"),
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


# --- ControllerSettings -------------------------------------------------------

def test_controller_defaults():
    s = ControllerSettings.from_env({})
    assert (s.bind, s.grpc_port, s.http_port, s.worker_count) == ("0.0.0.0", 50051, 8080, 1)


@pytest.mark.parametrize("variable, value", [
    ("SP_CONTROLLER_GRPC_PORT", "0"),
    ("SP_CONTROLLER_HTTP_PORT", "99999"),
    ("SP_CONTROLLER_HTTP_PORT", "http"),
    ("SP_WORKER_COUNT", "0"),
])
def test_controller_bad_values_name_the_variable(variable, value):
    settings_error(lambda: ControllerSettings.from_env({variable: value}), variable)


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


def test_controller_cli_bad_port():
    assert_one_line_error(run_module("controller", SP_CONTROLLER_HTTP_PORT="99999"),
                          "SP_CONTROLLER_HTTP_PORT", "99999")


def test_worker_cli_refuses_a_transactional_postgres_sink_without_checkpoints():
    assert_one_line_error(run_module("worker", SP_PIPELINE=str(POSTGRES_PIPELINE), SP_PG_HOST="db",
                                     SP_CHECKPOINT_FREQ="0"), "SP_CHECKPOINT_FREQ", "enriched_pg")


def test_worker_cli_missing_pipeline_file():
    assert_one_line_error(run_module("worker", SP_PIPELINE="/nonexistent/p.py"), "/nonexistent/p.py")
