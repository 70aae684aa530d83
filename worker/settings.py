"""Worker settings, read once from ``SP_*`` environment variables in ``main``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from sparkpoint.env import Env, SettingsError

_PG_PARTS = ("SP_PG_HOST", "SP_PG_PORT", "SP_PG_DATABASE", "SP_PG_USER", "SP_PG_PASSWORD")


def postgres_conninfo(env: Env) -> str | None:
    """PostgreSQL connection settings: one ``SP_PG_DSN`` (a libpq connection
    string or URI), or ``SP_PG_HOST`` with optional port, database, user and
    password; None if neither is set."""
    dsn = env.string("SP_PG_DSN", "")
    given = [name for name in _PG_PARTS if env.string(name, "")]
    if dsn and given:
        raise SettingsError("SP_PG_DSN", f"set either SP_PG_DSN or {', '.join(given)}, not both")
    if dsn:
        try:
            conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as error:
            raise SettingsError("SP_PG_DSN", f"not a valid PostgreSQL connection string "
                                             f"({str(error).strip()})") from None
        return dsn
    if not given:
        return None
    return make_conninfo(
        host=env.string("SP_PG_HOST"),
        port=env.port("SP_PG_PORT", 5432),
        dbname=env.string("SP_PG_DATABASE", "sparkpoint"),
        user=env.string("SP_PG_USER", "sparkpoint"),
        **({"password": password} if (password := env.string("SP_PG_PASSWORD", "")) else {}),
    )


@dataclass(frozen=True)
class WorkerSettings:
    pipeline: Path
    worker_index: int
    worker_count: int
    worker_id: str
    controller_addr: str
    work_dir: Path
    log_dir: Path
    output_dir: Path
    spark_master: str
    shuffle_partitions: int
    max_records_per_batch: int      # 0 = no cap
    trigger_interval_ms: int
    report_interval_ms: int
    checkpoint_dir: Path
    checkpoint_freq_ms: int         # 0 = checkpoints disabled
    checkpoint_retain: int
    force_graph_change: bool        # restore a changed pipeline over a checkpoint with finished nodes
    savepoint_dir: Path             # the savepoint root shared with the controller (exports, imports)
    postgres: str | None            # libpq connection string for PostgreSQL sinks; None: not configured
    test_fault: str                 # a fault sentinel point, for recovery tests only

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> WorkerSettings:
        env = Env(environ)
        count = env.integer("SP_WORKER_COUNT", 1, minimum=1, maximum=1024)
        index = env.integer("SP_WORKER_INDEX", 0, minimum=0)
        if index >= count:
            raise SettingsError("SP_WORKER_INDEX", f"must be below SP_WORKER_COUNT ({count}), got {index}")
        worker_id = env.string("SP_WORKER_ID", f"worker-{index}")
        return cls(
            pipeline=env.path("SP_PIPELINE", "pipelines/trades.py"),
            worker_index=index,
            worker_count=count,
            worker_id=worker_id,
            controller_addr=env.address("SP_CONTROLLER_ADDR", "localhost:50051"),
            work_dir=env.path("SP_WORK_DIR", f"var/work/{worker_id}"),
            log_dir=env.path("SP_LOG_DIR", "var/log"),
            output_dir=env.path("SP_OUTPUT_DIR", "var/output"),
            # local[threads, max task attempts]: plain local[N] never retries a
            # task, so one transient failure would fail the whole query.
            spark_master=env.string("SP_SPARK_MASTER", "local[2,4]"),
            shuffle_partitions=env.integer("SP_SHUFFLE_PARTITIONS", 2, minimum=1),
            max_records_per_batch=env.integer("SP_MAX_RECORDS_PER_BATCH", 10_000, minimum=0),
            trigger_interval_ms=env.integer("SP_TRIGGER_INTERVAL", 1000, minimum=0, unit="milliseconds"),
            report_interval_ms=env.integer("SP_REPORT_INTERVAL", 1000, minimum=50, unit="milliseconds"),
            checkpoint_dir=env.path("SP_CHECKPOINT_DIR", f"var/checkpoints/{worker_id}"),
            checkpoint_freq_ms=env.integer("SP_CHECKPOINT_FREQ", 5000, minimum=0, unit="milliseconds"),
            checkpoint_retain=env.integer("SP_CHECKPOINT_RETAIN", 3, minimum=1),
            force_graph_change=env.boolean("SP_FORCE_GRAPH_CHANGE", False),
            savepoint_dir=env.path("SP_SAVEPOINT_DIR", "var/savepoints"),
            postgres=postgres_conninfo(env),
            test_fault=environ.get("SP_TEST_FAULT", ""),
        )
