# Sparkpoint: every set-up step lives here, so a fresh machine needs only
# `make run` / `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PROTOS := $(wildcard proto/sparkpoint/v1/*.proto)
PROTO_OUT := $(PROTOS:.proto=_pb2.py) $(PROTOS:.proto=_pb2_grpc.py)

.PHONY: all deps java proto test unit integration run clean-local

all: deps proto

# Spark needs a Java runtime; install Debian's when the machine lacks one.
java:
	@command -v java >/dev/null 2>&1 || { \
	  echo "java not found: installing openjdk-17-jre-headless"; \
	  apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null; }

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

deps: java $(STAMP)

# Generated gRPC code; imports are package-qualified (proto.sparkpoint.v1).
proto/sparkpoint/v1/%_pb2.py proto/sparkpoint/v1/%_pb2_grpc.py: proto/sparkpoint/v1/%.proto $(STAMP)
	$(PY) -m grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=. $<

proto: $(PROTO_OUT)

test: deps proto
	$(PY) -m pytest -q -ra $(PYTEST_ARGS)

unit: deps proto
	$(PY) -m pytest -q -m "not integration" $(PYTEST_ARGS)

integration: deps proto
	$(PY) -m pytest -q -m integration $(PYTEST_ARGS)

# Controller, two workers and a producer as local processes on the embedded
# defaults (event log source, files sink). Ctrl-C stops everything.
run: deps proto
	$(PY) -m sparkpoint.devstack

clean-local:
	rm -rf var
