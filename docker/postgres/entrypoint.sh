#!/bin/bash
# Entrypoint of the Sparkpoint PostgreSQL image.
#
#   sparkpoint-postgres postgres [ARGS...]   initdb on first start, then run the server
#   sparkpoint-postgres healthcheck          pg_isready against the local server
#   sparkpoint-postgres COMMAND...           anything else is run as is
#
# Environment: PGDATA (the data directory, a volume), POSTGRES_PASSWORD or
# POSTGRES_PASSWORD_FILE (a file holding it, e.g. a Docker secret; one of
# them required on first start), POSTGRES_USER (default postgres),
# POSTGRES_DB (default: POSTGRES_USER), POSTGRES_INITDB_ARGS (extra initdb
# arguments), POSTGRES_TLS_CERT_FILE and POSTGRES_TLS_KEY_FILE (the server's
# certificate and key, e.g. Docker secrets: TLS on, and every TCP connection
# must use it).
set -euo pipefail

PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
export PATH="$PGBIN:$PATH"
: "${PGDATA:=/var/lib/postgresql/data}"
export PGDATA
USER_NAME=${POSTGRES_USER:-postgres}
DB_NAME=${POSTGRES_DB:-$USER_NAME}
# The server's sockets: in /tmp, the one place a read-only root leaves
# writable (a tmpfs over an image directory keeps that directory's owner, root).
SOCKETS=/tmp

if [ "${1:-}" = healthcheck ]; then
  exec pg_isready -q -h 127.0.0.1 -p "${PGPORT:-5432}" -U "$USER_NAME" -d "$DB_NAME"
fi
if [ "${1:-}" != postgres ]; then
  exec "$@"
fi
shift

if [ "$(id -u)" = 0 ]; then
  echo "sparkpoint-postgres: refusing to run as root" >&2
  exit 1
fi

if [ -n "${POSTGRES_PASSWORD_FILE:-}" ]; then
  if [ -n "${POSTGRES_PASSWORD:-}" ]; then
    echo "sparkpoint-postgres: set POSTGRES_PASSWORD or POSTGRES_PASSWORD_FILE, not both" >&2
    exit 1
  fi
  if [ ! -r "$POSTGRES_PASSWORD_FILE" ]; then
    echo "sparkpoint-postgres: POSTGRES_PASSWORD_FILE: cannot read $POSTGRES_PASSWORD_FILE" >&2
    exit 1
  fi
  POSTGRES_PASSWORD=$(head -n 1 "$POSTGRES_PASSWORD_FILE")
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "sparkpoint-postgres: POSTGRES_PASSWORD or POSTGRES_PASSWORD_FILE must be set to initialise $PGDATA" >&2
    exit 1
  fi
  echo "sparkpoint-postgres: initialising $PGDATA (user $USER_NAME, database $DB_NAME)"
  pwfile=$(mktemp)
  trap 'rm -f "$pwfile"' EXIT
  printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
  # shellcheck disable=SC2086
  initdb -D "$PGDATA" -U "$USER_NAME" --pwfile="$pwfile" --encoding=UTF8 --locale=C.UTF-8 \
    --auth-local=trust --auth-host=scram-sha-256 ${POSTGRES_INITDB_ARGS:-} >/dev/null
  rm -f "$pwfile"
  {
    echo "# Sparkpoint: password authentication from any address"
    echo "host all all 0.0.0.0/0 scram-sha-256"
    echo "host all all ::/0 scram-sha-256"
  } >> "$PGDATA/pg_hba.conf"
  if [ "$DB_NAME" != postgres ]; then
    # A private, socket-only server to create the database, then stop it.
    pg_ctl -D "$PGDATA" -w -o "-c listen_addresses='' -c unix_socket_directories=$SOCKETS" start >/dev/null
    psql -v ON_ERROR_STOP=1 -h "$SOCKETS" -U "$USER_NAME" -d postgres -q \
      -c "CREATE DATABASE \"$DB_NAME\"" >/dev/null
    pg_ctl -D "$PGDATA" -w -m fast stop >/dev/null
  fi
  echo "sparkpoint-postgres: initialised"
fi

tls=()
if [ -n "${POSTGRES_TLS_CERT_FILE:-}${POSTGRES_TLS_KEY_FILE:-}" ]; then
  for variable in POSTGRES_TLS_CERT_FILE POSTGRES_TLS_KEY_FILE; do
    if [ ! -r "${!variable:-}" ]; then
      echo "sparkpoint-postgres: $variable: cannot read '${!variable:-}' (both must be set for TLS)" >&2
      exit 1
    fi
  done
  # PostgreSQL refuses a key others can read; a Docker secret outside swarm
  # keeps the host file's mode, so the server gets a private copy.
  key="$SOCKETS/server.key"
  install -m 0600 "$POSTGRES_TLS_KEY_FILE" "$key"
  # TCP only with TLS (hostssl), whatever the data directory's pg_hba.conf
  # says; the local socket stays trusted as initdb set it. (The healthcheck's
  # pg_isready over TCP only asks whether the server answers.)
  hba="$SOCKETS/pg_hba.conf"
  {
    echo "local all all trust"
    echo "hostssl all all 0.0.0.0/0 scram-sha-256"
    echo "hostssl all all ::/0 scram-sha-256"
  } > "$hba"
  tls=(-c ssl=on -c ssl_cert_file="$POSTGRES_TLS_CERT_FILE" -c ssl_key_file="$key" -c hba_file="$hba")
  echo "sparkpoint-postgres: TLS on ($POSTGRES_TLS_CERT_FILE); TCP connections without it are refused"
fi

exec postgres -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories="$SOCKETS" "${tls[@]}" "$@"
