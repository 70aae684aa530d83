"""Worker settings: ``SP_*`` environment variables, parsed once in ``main``."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Self

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from pydantic import BeforeValidator, Field, PrivateAttr, SecretStr, field_validator, model_validator
from pydantic_settings import NoDecode

from sparkpoint import limits
from sparkpoint.errors import shown
from sparkpoint.secrets import SecretFile
from sparkpoint.settings import (
    Address,
    CertificateFile,
    ForceGraphChange,
    GrpcTlsCaFile,
    GrpcTlsCertFile,
    GrpcTlsKeyFile,
    GrpcTlsSettings,
    GrpcTokenFile,
    HealthMaxAge,
    LogDir,
    Milliseconds,
    Port,
    SavepointDir,
    SettingsError,
    UserPath,
    WorkerCount,
)

_PG_PARTS = ("pg_host", "pg_port", "pg_database", "pg_user", "pg_password", "pg_password_file", "pg_sslmode",
             "pg_sslrootcert")


# Where checkpoints fall in each interval of the wall clock: this share of
# SP_TRIGGER_INTERVAL after Spark's processing-time triggers, which fire at
# each multiple of their interval (ProcessingTimeExecutor.nextBatchTime).
CHECKPOINT_PHASE = 0.4

# The worker JVM's default options: the JVM's tier-4 (C2) compile thresholds,
# times ten (bench/results/jit-2026-11-27-b.md); and the parallel collector
# rather than G1, the JVM's choice on two cores: no concurrent collector
# threads, cheaper write barriers, and at a trickle a third of G1's young
# collection time (bench/results/stack-200-2026-12-02-f.md).
DEFAULT_JAVA_OPTIONS = ("-XX:Tier4InvocationThreshold=50000 -XX:Tier4MinInvocationThreshold=6000 "
                        "-XX:Tier4CompileThreshold=150000 -XX:Tier4BackEdgeThreshold=400000 -XX:+UseParallelGC")


# librdkafka property names; those Sparkpoint sets itself (and where the user says
# what they control instead); those that hold secrets (from files only).
KAFKA_PROPERTY = re.compile(r"^[a-z][a-z0-9_.]{0,127}$")
KAFKA_OWNED = {
    "bootstrap.servers": "SP_KAFKA_BOOTSTRAP",
    "group.id": "the source reads by assignment; its offsets live in Spark's checkpoint",
    "enable.auto.commit": "Spark's checkpoint holds the offsets",
    "enable.auto.offset.store": "Spark's checkpoint holds the offsets",
    "enable.partition.eof": "the reader stops at each batch's end offset",
    "auto.offset.reset": "from_kafka(fail_on_data_loss=...)",
    "transactional.id": "a Kafka sink's is sparkpoint.<worker>.<sink>, one per worker index and sink",
}
KAFKA_SECRET = re.compile(r"password|secret|jaas|^ssl\.key\.pem$")

# A hung holder's lock is broken after SP_HEARTBEAT_TIMEOUT, at least this
# many of its one-second touches: one late touch must not cost it its index.
HEARTBEATS_PER_TIMEOUT = 3

# In SP_CHECKPOINT_DIR (and SP_WORKER_ID, SP_GRPC_TLS_CERT_FILE, SP_GRPC_TLS_KEY_FILE):
# the index the process runs, so that it may take over any index (see SP_WORKER_ROLE).
INDEX = "{index}"


def _json_object(value: Any) -> Any:
    """A variable holding a JSON object of strings, numbers or booleans, each
    value as librdkafka spells it (decoded here, so that a bad one is named
    like any other bad value)."""
    if not isinstance(value, str):
        return value
    try:
        decoded = json.loads(value)
    except ValueError:
        decoded = None
    if not isinstance(decoded, dict) or not all(isinstance(v, (str, int, float)) for v in decoded.values()):
        raise ValueError(f"expected a JSON object of strings, numbers or booleans, got {shown(value)}")
    return {key: str(v).lower() if isinstance(v, bool) else str(v) for key, v in decoded.items()}


class WorkerSettings(GrpcTlsSettings):
    program = "worker"
    _takes_over: bool = PrivateAttr(False)

    pipeline: UserPath = Field(Path("pipelines/trades.py"), description="pipeline definition file")
    worker_count: WorkerCount = 1
    worker_index: int = Field(
        0, ge=0, description="this worker's index, below `SP_WORKER_COUNT`; it owns log partitions `p` with "
                             "`p % count == index`")
    worker_id: str = Field(default_factory=lambda given: f"worker-{given['worker_index']}",
                           description="name in status and logs: letters, digits, `_` `.` `-`, starting with a "
                                       "letter or digit, at most 64 characters (what the controller accepts)")
    worker_role: Literal["worker", "standby"] = Field(
        "worker", description="`standby`: start the Spark session, then wait and take over the index of the first "
                              "worker whose process ends (the lock on its checkpoint directory is free) and run as "
                              "that worker. With `{index}` in `SP_CHECKPOINT_DIR` a `worker` whose index a live "
                              "process holds waits as a standby too; without it, it stops")
    controller_addr: Address = Field("localhost:50051", description="controller gRPC address (`host:port`)")
    grpc_token_file: GrpcTokenFile = None
    grpc_tls_cert_file: GrpcTlsCertFile = None
    grpc_tls_key_file: GrpcTlsKeyFile = None
    grpc_tls_ca_file: GrpcTlsCaFile = None
    work_dir: UserPath = Field(
        default_factory=lambda given: Path(f"var/work/{given['worker_id']}"),
        description="Spark's working checkpoint directory (fast local storage; each run uses a fresh `run-*` "
                    "subdirectory)")
    checkpoint_dir: UserPath = Field(
        default_factory=lambda given: Path(f"var/checkpoints/{given['worker_id']}"),
        description="durable checkpoints (the persistent volume); one live worker per directory. `{index}` in it "
                    "(and in `SP_WORKER_ID`, `SP_GRPC_TLS_CERT_FILE`, `SP_GRPC_TLS_KEY_FILE`) stands for the index "
                    "run: every index's directory must then be reachable, so that any worker may take over any "
                    "index")
    checkpoint_freq_ms: Milliseconds = Field(
        1000, ge=0, validation_alias="SP_CHECKPOINT_FREQ",
        description=f"milliseconds between checkpoints, each {CHECKPOINT_PHASE} of `SP_TRIGGER_INTERVAL` after "
                    "Spark's triggers (it cuts the batches they just committed); `0` disables them (a restart "
                    "replays the source from the beginning)")
    checkpoint_retain: int = Field(
        3, ge=1, description="checkpoints kept; older ones and files no kept checkpoint references are deleted")
    max_same_failures: int = Field(
        5, ge=1, description="a failed query restores the last complete checkpoint into the living Spark session "
                             "and restarts (backing off when it fails again); the same failure this many times in "
                             "a row stops the worker")
    heartbeat_timeout_ms: Milliseconds = Field(
        10_000, ge=0, validation_alias="SP_HEARTBEAT_TIMEOUT",
        description="a worker touches its checkpoint directory's lock every second; a process starting or standing "
                    "by breaks the lock of one that has not for this many milliseconds (hung, paused, cut off) and "
                    "takes its index over, and the old process stops before its next write. `0`: only an index "
                    "whose process ended is taken over")
    log_dir: LogDir = Path("var/log")
    output_dir: UserPath = Field(Path("var/output"), description="root of the files sink")
    # local[threads, max task attempts]: plain local[N] never retries a task,
    # so one transient failure would fail the whole query.
    spark_master: str = Field(
        "local[2,4]", description="`spark.master` (local mode: 2 threads, up to 4 attempts per task); point at a "
                                  "cluster to scale a worker out")
    shuffle_partitions: int = Field(
        1, ge=1, description="`spark.sql.shuffle.partitions` (fixed for a query's lifetime; one worker's state is "
                             "small: more partitions mean more tasks and state files every batch). At `1` a stateful "
                             "node's input is coalesced to one partition: no shuffle before its state store")
    java_options: str = Field(
        DEFAULT_JAVA_OPTIONS, validation_alias="SP_JAVA_OPTIONS",
        description="options of the worker's Spark JVM (`spark.driver.extraJavaOptions`, after those that map "
                    "the class archive), split as a shell would. The default leaves C2 to code ten times "
                    "hotter than the JVM would: a restarted worker's start-up and first batch stay quick "
                    "under load (C1), while the records' parsing and writing get C2; `-XX:TieredStopAtLevel=4`: "
                    "the JVM's own thresholds, `-XX:TieredStopAtLevel=1`: C1 only (a third less throughput). "
                    "It collects garbage with the parallel collector, lighter than G1 at a trickle; "
                    "`-XX:+UseG1GC`: G1")
    max_records_per_batch: int = Field(
        1_000_000, ge=0, description="per-batch record cap on sources (`0` = none): it bounds the batches a "
                                     "recovery replays (a few seconds of one worker's work), not a live "
                                     "stream: at a 1 s trigger a worker takes up to this many records a second; "
                                     "`from_log(max_records_per_batch=)` overrides")
    trigger_interval_ms: Milliseconds = Field(
        1000, ge=0, validation_alias="SP_TRIGGER_INTERVAL",
        description="micro-batch trigger interval, milliseconds, of queries whose sink publishes on checkpoint "
                    "completion (their output waits for a checkpoint anyway)")
    upsert_trigger_interval_ms: Milliseconds = Field(
        500, ge=0, validation_alias="SP_UPSERT_TRIGGER_INTERVAL",
        description="micro-batch trigger interval, milliseconds, of queries whose sink publishes each batch as it "
                    "comes (upsert, console): their latency")
    report_interval_ms: Milliseconds = Field(
        1000, ge=50, validation_alias="SP_REPORT_INTERVAL", description="progress report interval, milliseconds")
    spark_ui_port: Port | None = Field(
        None, description="serve Spark's own web UI for this worker on this port (every interface; see \"Spark's "
                          "UI\"); unset: no UI")
    force_graph_change: ForceGraphChange = False
    savepoint_dir: SavepointDir = Path("var/savepoints")
    pg_host: str | None = Field(
        None, description="PostgreSQL host for `to_postgres` sinks; required by a pipeline that has one, unless "
                          "`SP_PG_DSN` is set")
    pg_port: Port = Field(5432, description="PostgreSQL port")
    pg_database: str = Field("sparkpoint", description="database")
    pg_user: str = Field("sparkpoint", description="user")
    pg_password: SecretStr | None = Field(None, description="password")
    pg_password_file: SecretFile | None = Field(
        None, description="instead of `SP_PG_PASSWORD`: a file holding the password (a Docker secret)")
    pg_sslmode: Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] | None = Field(
        None, description="libpq's `sslmode`; `verify-full` (the compose stack's) checks PostgreSQL's certificate "
                          "against `SP_PG_SSLROOTCERT` and the host name; unset: libpq's default (`prefer`)")
    pg_sslrootcert: CertificateFile | None = Field(
        None, description="PEM file of the CA that signed PostgreSQL's certificate (a Docker secret); required by "
                          "`verify-ca` and `verify-full`")
    pg_dsn: str | None = Field(
        None, description="instead of the settings above: one libpq connection string or `postgresql://` URI")
    kafka_bootstrap: str | None = Field(
        None, description="Kafka's bootstrap servers (`host:port[,host:port...]`) for `from_kafka` sources and "
                          "`to_kafka` sinks; required by a pipeline that has one")
    kafka_config: Annotated[dict[str, str], NoDecode, BeforeValidator(_json_object)] = Field(
        default_factory=dict,
        description="librdkafka properties for the Kafka clients, as a JSON object: TLS and SASL, e.g. "
                    "`{\"security.protocol\": \"SASL_SSL\", \"sasl.mechanism\": \"PLAIN\", \"sasl.username\": "
                    "\"reader\"}`; `transaction.timeout.ms` is the Kafka sinks' producers' only. Secrets go in "
                    "`SP_KAFKA_CONFIG_FILES`; the properties Sparkpoint sets itself are refused")
    kafka_config_files: Annotated[dict[str, SecretFile], NoDecode, BeforeValidator(_json_object)] = Field(
        default_factory=dict,
        description="librdkafka properties whose values are read from files (Docker secrets), as a JSON object "
                    "of property to path, e.g. `{\"sasl.password\": \"/run/secrets/kafka-password\"}`")
    health_max_age_s: HealthMaxAge = Field(30, validation_alias="SP_HEALTH_MAX_AGE")
    test_fault: str = Field(
        "", description="tests only: `checkpoint.blobs_copied[:n]`, `checkpoint.manifest_written[:n]`, "
                        "`publish.files_placed[:n]` (a files sink placed a publish's files, its mark not yet "
                        "written), `publish.postgres_written[:n]` (a transactional PostgreSQL sink wrote its "
                        "rows and mark, before COMMIT) or `publish.kafka_begun`, `publish.kafka_producing`, "
                        "`publish.kafka_produced`, `publish.kafka_committed` (a Kafka sink's transaction begun, "
                        "its first record sent, all sent with the mark, committed) makes the worker SIGKILL itself "
                        "there, once; "
                        "`staging.commit[:n][:always]` fails the query staging a batch instead (once, or every "
                        "time from the n-th)")

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Self:
        return cls.for_index(environ, None)

    @classmethod
    def for_index(cls, environ: Mapping[str, str], index: int | None) -> Self:
        """The settings of worker ``index`` (None: ``SP_WORKER_INDEX``'s): every
        ``{index}`` in an ``SP_*`` value replaced by it."""
        takes_over = INDEX in environ.get("SP_CHECKPOINT_DIR", "")
        given = environ.get("SP_WORKER_INDEX", "").strip() or "0"
        chosen = given if index is None else str(index)
        settings = super().from_env({**{name: value.replace(INDEX, chosen) if name.startswith("SP_") else value
                                        for name, value in environ.items()}, "SP_WORKER_INDEX": chosen})
        if takes_over and INDEX not in (environ.get("SP_WORKER_ID", "").strip() or INDEX):
            raise SettingsError("SP_WORKER_ID", f"must contain {INDEX}, or be unset, when SP_CHECKPOINT_DIR does: a "
                                                "worker that takes over an index takes its id")
        if settings.worker_role == "standby":
            if not takes_over:
                raise SettingsError("SP_WORKER_ROLE", f"a standby needs {INDEX} in SP_CHECKPOINT_DIR, where it "
                                                      "finds the checkpoints of the index it takes over")
            if not environ.get("SP_WORK_DIR", "").strip():
                raise SettingsError("SP_WORK_DIR", "a standby needs a working directory of its own: set it")
        settings._takes_over = takes_over
        return settings

    @property
    def takes_over(self) -> bool:
        """Whether this worker may run another index than its own
        (``{index}`` in ``SP_CHECKPOINT_DIR``)."""
        return self._takes_over

    @field_validator("worker_id")
    @classmethod
    def _a_name(cls, worker_id: str) -> str:
        if not limits.NAME.fullmatch(worker_id):
            raise ValueError(f"{shown(worker_id)} is not a valid worker id ({limits.NAME_RULE})")
        return worker_id

    @field_validator("heartbeat_timeout_ms")
    @classmethod
    def _beyond_heartbeats(cls, timeout_ms: int) -> int:
        if 0 < timeout_ms < 1000 * HEARTBEATS_PER_TIMEOUT:
            raise ValueError(f"must be 0 or at least {1000 * HEARTBEATS_PER_TIMEOUT} (the lock is touched every "
                             f"second), got {timeout_ms}")
        return timeout_ms

    @property
    def heartbeat_timeout_s(self) -> float | None:
        """How long a lock's holder may be silent before it is broken (None: never)."""
        return self.heartbeat_timeout_ms / 1000 or None

    @field_validator("java_options")
    @classmethod
    def _shell_words(cls, options: str) -> str:
        try:
            shlex.split(options)
        except ValueError as error:
            raise ValueError(f"cannot split {shown(options)} into options ({error})") from None
        return options

    @field_validator("pg_dsn")
    @classmethod
    def _a_connection_string(cls, dsn: str | None) -> str | None:
        try:
            conninfo_to_dict(dsn or "")
        except psycopg.ProgrammingError as error:
            raise ValueError(f"not a valid PostgreSQL connection string ({str(error).strip()})") from None
        return dsn

    @field_validator("kafka_config", "kafka_config_files")
    @classmethod
    def _librdkafka_properties(cls, config: dict, info) -> dict:
        for prop in config:
            if not KAFKA_PROPERTY.fullmatch(prop):
                raise ValueError(f"{shown(prop)} is not a librdkafka property name")
            if prop in KAFKA_OWNED:
                raise ValueError(f"{prop} is set by Sparkpoint ({KAFKA_OWNED[prop]})")
            if info.field_name == "kafka_config" and KAFKA_SECRET.search(prop):
                raise ValueError(f"{prop} is a secret: give it in SP_KAFKA_CONFIG_FILES (a file holding it)")
        return config

    @property
    def kafka(self) -> tuple[dict[str, str], dict[str, str]] | None:
        """The Kafka clients' librdkafka properties, and the properties read
        from files (property -> path); None without ``SP_KAFKA_BOOTSTRAP``."""
        if not self.kafka_bootstrap:
            return None
        return ({"bootstrap.servers": self.kafka_bootstrap, **self.kafka_config},
                {prop: str(secret.path) for prop, secret in self.kafka_config_files.items()})

    @model_validator(mode="after")
    def _index_below_count(self) -> WorkerSettings:
        if self.worker_index >= self.worker_count:
            raise SettingsError("SP_WORKER_INDEX", f"must be below SP_WORKER_COUNT ({self.worker_count}), "
                                                   f"got {self.worker_index}")
        return self

    @model_validator(mode="after")
    def _one_postgres_source(self) -> WorkerSettings:
        given = [self.variable(part) for part in _PG_PARTS if part in self.model_fields_set]
        if self.pg_dsn and given:
            raise SettingsError("SP_PG_DSN", f"set either SP_PG_DSN or {', '.join(given)}, not both")
        if self.pg_password and self.pg_password_file:
            raise SettingsError("SP_PG_PASSWORD_FILE", "set either SP_PG_PASSWORD or SP_PG_PASSWORD_FILE, not both")
        if given and not self.pg_host:
            raise SettingsError("SP_PG_HOST", f"is required with {', '.join(given)}")
        if self.pg_sslmode in ("verify-ca", "verify-full") and not self.pg_sslrootcert:
            raise SettingsError("SP_PG_SSLROOTCERT", f"is required with SP_PG_SSLMODE={self.pg_sslmode} (the "
                                                     "certificate of the CA that signed PostgreSQL's)")
        return self

    @property
    def postgres(self) -> str | None:
        """The libpq connection string for PostgreSQL sinks; None if not configured."""
        if self.pg_dsn:
            return self.pg_dsn
        if not self.pg_host:
            return None
        password = ({"password": self.pg_password.get_secret_value()} if self.pg_password else
                    {"password": self.pg_password_file.value} if self.pg_password_file else {})
        tls = {key: str(value) for key, value in (("sslmode", self.pg_sslmode), ("sslrootcert", self.pg_sslrootcert))
               if value is not None}
        return make_conninfo(host=self.pg_host, port=self.pg_port, dbname=self.pg_database, user=self.pg_user,
                             **password, **tls)
