# Sparkpoint: every set-up step lives here, so a fresh machine needs only
# `make run` / `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PROTOS := $(wildcard proto/sparkpoint/v1/*.proto)
# Generated into the package namespace: proto/sparkpoint/v1/x.proto -> sparkpoint/v1/x_pb2.py.
PROTO_OUT := $(patsubst proto/%.proto,%_pb2.py,$(PROTOS)) $(patsubst proto/%.proto,%_pb2_grpc.py,$(PROTOS))

.PHONY: all deps java postgres-server chromium proto jars test unit integration chaos run settings-doc docs docs-screenshot clean-local

all: deps proto jars

# Spark needs a Java runtime, and the worker's JVM classes (jvm/) a compiler;
# install Debian's JDK when the machine lacks one.
java:
	@command -v javac >/dev/null 2>&1 && command -v jar >/dev/null 2>&1 || { \
	  echo "javac not found: installing openjdk-17-jdk-headless"; \
	  apt-get update -qq && apt-get install -y -qq openjdk-17-jdk-headless >/dev/null; }

# The tests run private PostgreSQL clusters (tests/pgserver.py) from Debian's
# server binaries; install them when missing. The drop-in stops the package
# from creating (and so starting) the default cluster: the tests start their own.
postgres-server:
	@ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || { \
	  echo "PostgreSQL server not found: installing postgresql"; \
	  mkdir -p /etc/postgresql-common/createcluster.d && \
	  echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/sparkpoint-no-main-cluster.conf && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; }

# The status page's browser test (tests/integration/test_status_page.py) drives
# Debian's chromium through its chromedriver (Selenium never downloads a
# browser here); install both when missing.
chromium:
	@{ command -v chromium && command -v chromedriver; } >/dev/null 2>&1 || { \
	  echo "chromium not found: installing chromium and chromium-driver"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; }

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	docker/pyspark-imports.sh $(PY)
	touch $@

deps: java postgres-server chromium $(STAMP)

# Generated gRPC code; imports are package-qualified (sparkpoint.v1).
sparkpoint/v1/%_pb2.py sparkpoint/v1/%_pb2_grpc.py: proto/sparkpoint/v1/%.proto $(STAMP)
	$(PY) -m grpc_tools.protoc -I proto --python_out=. --pyi_out=. --grpc_python_out=. $<

proto: $(PROTO_OUT)

# The worker's JVM classes, compiled against the Spark jars of the venv's
# PySpark into the worker package (worker.runtime.session loads the jar).
JAVA_SOURCES := $(shell find jvm -name '*.java')
# Resources the jar carries as they are (jvm/resources/yarn-default.xml).
JAVA_RESOURCES := $(shell find jvm/resources -type f)
JAR := worker/runtime/jars/sparkpoint-jvm.jar
$(JAR): $(JAVA_SOURCES) $(JAVA_RESOURCES) $(STAMP) | java
	@rm -rf build/jvm && mkdir -p build/jvm $(@D)
	javac --release 17 -nowarn -d build/jvm \
	  -cp "$$($(PY) -c 'import pathlib, pyspark; print(pathlib.Path(pyspark.__file__).parent / "jars")')/*" \
	  $(JAVA_SOURCES)
	jar cf $@ -C build/jvm . -C jvm/resources .

# The classes a worker's JVM loads, archived so the next start maps them
# instead of loading them from Spark's jars (about half the JVM's start-up
# CPU; worker/runtime/classarchive.py). Rebuilt with the jar or the venv.
CLASS_ARCHIVE := worker/runtime/jars/spark-classes.jsa
$(CLASS_ARCHIVE): $(JAR) $(STAMP)
	$(PY) -m worker.runtime.classarchive $@ >/dev/null 2>build/classarchive.log || { cat build/classarchive.log >&2; exit 1; }

jars: $(JAR) $(CLASS_ARCHIVE)

# The whole suite: unit, integration (local processes, PostgreSQL) and chaos
# (the compose stack, its images built once per run, cached).
test: deps proto jars
	$(PY) -m pytest -q -ra --durations=30 $(PYTEST_ARGS)

# Subsets: fast unit tests; local processes; containers only.
unit: deps proto jars
	$(PY) -m pytest -q -m "not integration and not chaos" $(PYTEST_ARGS)

integration: deps proto jars
	$(PY) -m pytest -q -m integration $(PYTEST_ARGS)

chaos: deps proto jars
	$(PY) -m pytest -q -ra -s -m chaos $(PYTEST_ARGS)

# Controller, two workers and a producer as local processes on the embedded
# defaults (event log source, files sink). Ctrl-C stops everything.
run: deps proto jars
	$(PY) -m sparkpoint.devstack

# The configuration reference's table (docs/configuration.md), from the settings classes.
settings-doc: deps
	$(PY) -m sparkpoint_cli.settings_doc

# The documentation site (mkdocs.yml, pages in docs/) on http://localhost:8000; `make test` builds it --strict.
docs: deps
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs serve

# The status page's screenshot in the docs, taken again by its browser test.
docs-screenshot: deps proto
	$(PY) -m pytest -q tests/integration/test_status_page.py
	cp test-artifacts/status-page.png docs/assets/status-page.png

clean-local:
	rm -rf var

# ---------------------------------------------------------------------------
# Docker. Images build offline: base root filesystems made with debootstrap
# from the machine's Debian mirror and `docker import`ed, Python packages from
# a wheelhouse built on the host; nothing is pulled from a registry.
#   make images   base images, wheelhouse, then the controller, worker and postgres images
#                 (and Prometheus's with PROFILE=monitoring, the broker's with PROFILE=kafka)
#   make up       images, `compose up -d`, wait until every service is healthy;
#                 PROFILE=monitoring adds Prometheus scraping the controller,
#                 PROFILE=kafka a Kafka broker the trades go through (docker/compose.kafka.yml),
#                 SP_WORKER_COUNT=2 a second worker
#   make down     stop the stack (volumes kept)
#   make clean    stop it, delete its volumes and build/
#   helpers: docker-ps, docker-logs, docker-crash SERVICE=worker-0, docker-clean-images
# COMPOSE_PROJECT_NAME separates stacks (tests can run their own);
# SP_BASE_SOURCE=registry starts the bases from a public Debian image instead.
COMPOSE_PROJECT_NAME ?= sparkpoint
export COMPOSE_PROJECT_NAME
# The `docker compose` plugin when present, else the docker-compose binary.
COMPOSE ?= $(shell if docker compose version >/dev/null 2>&1; then echo "docker compose"; else echo docker-compose; fi)
# Optional compose profiles (PROFILE=monitoring) and extra files (e.g.
# COMPOSE_FILES="docker-compose.yml docker/compose.spark-ui.yml").
PROFILE ?=
COMPOSE_FILES ?= docker-compose.yml
MONITORING := $(filter monitoring,$(PROFILE))
# The kafka profile is a second compose file (docker/compose.kafka.yml): a
# broker, a producer writing to it, the workers on pipelines/trades_kafka.py.
KAFKA := $(filter kafka,$(PROFILE))
KAFKA_FILES := $(if $(KAFKA),docker/compose.kafka.yml)
# Workers: SP_WORKER_COUNT from make's command line or the environment, else
# from .env, else 1 (as docker-compose.yml reads it). Two run worker-1 too:
# the compose file's scale-out profile.
WORKERS := $(or $(SP_WORKER_COUNT),$(shell sed -n 's/^SP_WORKER_COUNT=//p' .env 2>/dev/null | tail -n 1),1)
WORKER_SERVICES = $(if $(filter 1,$(WORKERS)),worker-0,$(if $(filter 2,$(WORKERS)),worker-0 worker-1,$(error \
  SP_WORKER_COUNT=$(WORKERS): the compose stack runs 1 or 2 workers (a third needs a service of its own; see \
  docker-compose.yml))))
STACK_PROFILES = $(PROFILE) $(if $(filter worker-1,$(WORKER_SERVICES)),scale-out)
DC = $(COMPOSE) -p $(COMPOSE_PROJECT_NAME) $(foreach f,$(COMPOSE_FILES) $(KAFKA_FILES),-f $(f)) \
  $(foreach p,$(filter-out kafka,$(STACK_PROFILES)),--profile $(p))
# Stopping takes down every profile's services, whichever were started.
DC_ALL = $(COMPOSE) -p $(COMPOSE_PROJECT_NAME) $(foreach f,$(COMPOSE_FILES) docker/compose.kafka.yml,-f $(f)) \
  --profile monitoring --profile scale-out
UP_TIMEOUT ?= 420
# The stack's secrets (REST token, gRPC secret, PostgreSQL password): generated
# here on first `make up`, kept out of git, handed to the services as Docker secrets.
SP_SECRETS_DIR ?= .secrets
export SP_SECRETS_DIR
WHEELHOUSE := build/wheelhouse
IMAGE_INPUTS := pyproject.toml controller worker proto sparkpoint sparkpoint_cli $(WHEELHOUSE)

.PHONY: images monitoring-images kafka-images docker-tools base-images wheelhouse secrets up down clean docker-ps docker-logs docker-crash docker-clean-images savepoint

docker-tools:
	@command -v docker >/dev/null 2>&1 || { echo "docker is not installed" >&2; exit 1; }
	@[ "$(SP_BASE_SOURCE)" = registry ] || command -v debootstrap >/dev/null 2>&1 || { \
	  echo "debootstrap not found: installing it"; \
	  apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }

# sparkpoint-base-{python,java,postgres}:<hash of package list + script>; skipped when present.
base-images: docker-tools
	@docker/build-rootfs.sh python >/dev/null
	@docker/build-rootfs.sh java >/dev/null
	@docker/build-rootfs.sh postgres >/dev/null

$(WHEELHOUSE)/.stamp: pyproject.toml docker/wheelhouse.sh
	@PYTHON=$(PYTHON) docker/wheelhouse.sh $(WHEELHOUSE)

wheelhouse: $(WHEELHOUSE)/.stamp

# Prometheus for the monitoring profile, from Debian's package (not built otherwise).
monitoring-images: docker-tools
	@docker/build-rootfs.sh prometheus >/dev/null
	@docker/build-image.sh prometheus docker/prometheus/Dockerfile docker/prometheus "$$(cat build/base-prometheus.ref)" \
	  docker/prometheus >/dev/null

# The kafka profile's broker: the venv's noida-db binary (the tests' broker,
# pinned in pyproject.toml) on the python base image.
kafka-images: base-images $(STAMP)
	@cp "$$($(PY) -c 'import noida_db, pathlib; print(pathlib.Path(noida_db.__file__).parent / "noida-db")')" \
	  docker/kafka/noida-db
	@docker/build-image.sh kafka docker/kafka/Dockerfile docker/kafka "$$(cat build/base-python.ref)" \
	  docker/kafka >/dev/null

# Each image is tagged with a hash of its inputs (and :latest); unchanged ones are not rebuilt.
images: proto jars base-images wheelhouse $(if $(MONITORING),monitoring-images) $(if $(KAFKA),kafka-images)
	@docker/build-image.sh controller Dockerfile.controller . "$$(cat build/base-python.ref)" \
	  $(IMAGE_INPUTS) docker/healthcheck-http.py docker/healthcheck-producer.py >/dev/null
	@docker/build-image.sh worker Dockerfile.worker . "$$(cat build/base-java.ref)" \
	  $(IMAGE_INPUTS) pipelines docker/pyspark-imports.sh jvm >/dev/null
	@docker/build-image.sh postgres docker/postgres/Dockerfile docker/postgres "$$(cat build/base-postgres.ref)" \
	  docker/postgres >/dev/null
	@docker images --filter 'reference=sparkpoint-*:latest'

secrets: $(STAMP)
	@$(PY) -m sparkpoint.stack_secrets $(SP_SECRETS_DIR)

up: images secrets
	$(DC) up -d --remove-orphans
	@COMPOSE="$(DC)" docker/wait-healthy.sh $(UP_TIMEOUT) controller $(WORKER_SERVICES) \
	  $(if $(KAFKA),kafka kafka-producer,producer) postgres \
	  $(if $(MONITORING),prometheus)
	@port=$$($(DC) port controller 8080 | sed 's/.*://'); \
	  echo "Sparkpoint is running (project $(COMPOSE_PROJECT_NAME)):"; \
	  echo "  the REST API needs the token in $(SP_SECRETS_DIR)/api-token (every endpoint but /health):"; \
	  echo "  status:      SP_API_TOKEN_FILE=$(SP_SECRETS_DIR)/api-token sparkpoint status --controller http://localhost:$$port"; \
	  echo "               curl -H \"Authorization: Bearer \$$(cat $(SP_SECRETS_DIR)/api-token)\" localhost:$$port/status"; \
	  echo "  metrics:     the same with localhost:$$port/metrics"; \
	  echo "  status page: http://localhost:$$port/ (it asks for the token in $(SP_SECRETS_DIR)/api-token)"; \
	  echo "  API docs:    http://localhost:$$port/docs, with that Authorization header"; \
	  echo "  logs:        $(COMPOSE) -p $(COMPOSE_PROJECT_NAME) logs -f worker-0"
	@$(if $(MONITORING),echo "  Prometheus:  http://localhost:$$($(DC) port prometheus 9090 | sed 's/.*://')/")

down:
	$(DC_ALL) down --remove-orphans

docker-ps:
	$(DC) ps

# The savepoint tool in the controller's container: make savepoint ARGS="create nightly".
savepoint:
	$(DC) exec -T controller python -m sparkpoint_cli savepoint $(ARGS)

docker-logs:
	$(DC) logs --tail=100

# Crash one service (SERVICE=worker-0): SIGKILL every process in its container
# from inside, as a crash would, so its restart policy brings it back.
# (`docker kill` counts as a manual stop: Docker then skips the restart policy.)
SERVICE ?= worker-0
docker-crash:
	@id=$$($(DC) ps -q $(SERVICE)); [ -n "$$id" ] || { echo "no container for $(SERVICE)" >&2; exit 1; }; \
	  docker exec "$$id" sh -c 'kill -KILL -1'; \
	  echo "crashed $(SERVICE) ($$(echo $$id | cut -c1-12)); restart policy: $$(docker inspect -f '{{.HostConfig.RestartPolicy.Name}}' $$id)"

clean:
	$(DC_ALL) down -v --remove-orphans
	@if awk -v d="$(CURDIR)/build/" 'index($$2 "/", d) == 1 { f = 1 } END { exit !f }' /proc/mounts; then \
	  echo "something is mounted under build/ (an interrupted debootstrap?): unmount it first" >&2; exit 1; fi
	rm -rf build

docker-clean-images:
	-docker rmi $$(docker images --format '{{.Repository}}:{{.Tag}}' | grep '^sparkpoint-') 2>/dev/null
