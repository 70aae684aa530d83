#!/usr/bin/env bash
# Wait until the named compose services' containers are all healthy:
#
#   docker/wait-healthy.sh TIMEOUT_S SERVICE...
#
# COMPOSE (the compose command, e.g. "docker compose" or docker-compose) and
# COMPOSE_PROJECT_NAME come from the environment (the Makefile sets both).
# Prints progress; on timeout prints `ps` and each unhealthy service's last
# log lines and health-check output, and exits 1.
set -euo pipefail

TIMEOUT=${1:?usage: $0 TIMEOUT_S SERVICE...}
shift
COMPOSE=${COMPOSE:-docker-compose}
deadline=$(( $(date +%s) + TIMEOUT ))
start=$(date +%s)
last_line=""

state_of() {   # SERVICE -> healthy | starting | unhealthy | exited(N) | missing | running (no health check)
  local id
  id=$($COMPOSE ps -q "$1" 2>/dev/null | head -n 1)
  [ -n "$id" ] || { echo missing; return; }
  docker inspect -f '{{if .State.Running}}{{if .State.Health}}{{.State.Health.Status}}{{else}}running{{end}}{{else}}exited({{.State.ExitCode}}){{end}}' "$id" 2>/dev/null || echo missing
}

while :; do
  all=1
  line=""
  for service in "$@"; do
    state=$(state_of "$service")
    line+="$service=$state "
    [ "$state" = healthy ] || [ "$state" = running ] || all=0
  done
  if [ "$all" = 1 ]; then
    echo "all healthy after $(( $(date +%s) - start ))s: $line"
    exit 0
  fi
  if [ "$line" != "$last_line" ]; then
    echo "  [$(( $(date +%s) - start ))s] $line"
    last_line=$line
  fi
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "not healthy after ${TIMEOUT}s: $line" >&2
    $COMPOSE ps >&2 || true
    for service in "$@"; do
      state=$(state_of "$service")
      [ "$state" = healthy ] && continue
      echo "---- $service ($state): last log lines" >&2
      $COMPOSE logs --tail=30 "$service" >&2 || true
      id=$($COMPOSE ps -q "$service" 2>/dev/null | head -n 1)
      [ -n "$id" ] && docker inspect -f '{{if .State.Health}}{{range .State.Health.Log}}{{.Output}}{{end}}{{end}}' "$id" 2>/dev/null | tail -n 3 >&2
    done
    exit 1
  fi
  sleep 3
done
