#!/bin/bash
# Entrypoint of the Sparkpoint PostgreSQL image.
#
#   sparkpoint-postgres postgres [ARGS...]   initdb on first start, then run the server
#   sparkpoint-postgres healthcheck          pg_isready against the local server
#   sparkpoint-postgres COMMAND...           anything else is run as is
#
# Environment: PGDATA (the data directory, a volume), POSTGRES_PASSWORD or
# POSTGRES_PASSWORD_FILE (a file holding it, e.g. a Docker secret; one of
# them required on first start), POSTGRES_USER (the sinks' role, default
# sparkpoint), POSTGRES_DB (default: POSTGRES_USER), POSTGRES_READER_PASSWORD
# or POSTGRES_READER_PASSWORD_FILE (optional: a read-only role
# <POSTGRES_USER>_reader), POSTGRES_INITDB_ARGS (extra initdb arguments),
# POSTGRES_TLS_CERT_FILE and POSTGRES_TLS_KEY_FILE (the server's certificate
# and key, e.g. Docker secrets: TLS on, and every TCP connection must use it).
#
# Least privilege (first start): the database superuser is `postgres`, with a
# random password no one keeps: it logs in over the container's own socket
# only (TCP refuses it). POSTGRES_USER is an ordinary role (no superuser, no
# role or database creation, so no COPY ... TO PROGRAM) that owns
# POSTGRES_DB and so its public schema: the tables its sinks create, and
# their progress table. The reader role may connect and SELECT the tables
# POSTGRES_USER creates, nothing else.
set -euo pipefail

PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
export PATH="$PGBIN:$PATH"
: "${PGDATA:=/var/lib/postgresql/data}"
export PGDATA
SUPERUSER=postgres
USER_NAME=${POSTGRES_USER:-sparkpoint}
DB_NAME=${POSTGRES_DB:-$USER_NAME}
READER_NAME=${USER_NAME}_reader
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

# A password from VARIABLE or VARIABLE_FILE (not both), into VARIABLE.
password_from() {
  local variable=$1 file_variable=${1}_FILE
  if [ -n "${!file_variable:-}" ]; then
    if [ -n "${!variable:-}" ]; then
      echo "sparkpoint-postgres: set $variable or $file_variable, not both" >&2
      exit 1
    fi
    if [ ! -r "${!file_variable}" ]; then
      echo "sparkpoint-postgres: $file_variable: cannot read ${!file_variable}" >&2
      exit 1
    fi
    printf -v "$variable" '%s' "$(head -n 1 "${!file_variable}")"
  fi
}
password_from POSTGRES_PASSWORD
password_from POSTGRES_READER_PASSWORD

# TCP: password authentication from any address, never the superuser.
hba_tcp_lines() {
  local host=$1
  echo "$host all $SUPERUSER 0.0.0.0/0 reject"
  echo "$host all $SUPERUSER ::/0 reject"
  echo "$host all all 0.0.0.0/0 scram-sha-256"
  echo "$host all all ::/0 scram-sha-256"
}

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "sparkpoint-postgres: POSTGRES_PASSWORD or POSTGRES_PASSWORD_FILE must be set to initialise $PGDATA" >&2
    exit 1
  fi
  if [ "$USER_NAME" = "$SUPERUSER" ] || [ "$DB_NAME" = postgres ]; then
    echo "sparkpoint-postgres: POSTGRES_USER and POSTGRES_DB must not be postgres (the superuser's, kept in the" \
         "container)" >&2
    exit 1
  fi
  echo "sparkpoint-postgres: initialising $PGDATA (role $USER_NAME owning database $DB_NAME)"
  pwfile=$(mktemp)
  trap 'rm -f "$pwfile"' EXIT
  head -c 32 /dev/urandom | base64 > "$pwfile"       # the superuser's: never used, never kept
  # shellcheck disable=SC2086
  initdb -D "$PGDATA" -U "$SUPERUSER" --pwfile="$pwfile" --encoding=UTF8 --locale=C.UTF-8 \
    --auth-local=trust --auth-host=scram-sha-256 ${POSTGRES_INITDB_ARGS:-} >/dev/null
  rm -f "$pwfile"
  { echo "# Sparkpoint"; hba_tcp_lines host; } >> "$PGDATA/pg_hba.conf"
  # A private, socket-only server to create the roles and the database, then stop it.
  pg_ctl -D "$PGDATA" -w -o "-c listen_addresses='' -c unix_socket_directories=$SOCKETS" start >/dev/null
  psql -v ON_ERROR_STOP=1 -h "$SOCKETS" -U "$SUPERUSER" -d postgres -q \
    -v user="$USER_NAME" -v db="$DB_NAME" -v password="$POSTGRES_PASSWORD" >/dev/null <<'SQL'
CREATE ROLE :"user" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'password';
CREATE DATABASE :"db" OWNER :"user";
REVOKE ALL ON DATABASE :"db" FROM PUBLIC;
SQL
  if [ -n "${POSTGRES_READER_PASSWORD:-}" ]; then
    psql -v ON_ERROR_STOP=1 -h "$SOCKETS" -U "$SUPERUSER" -d "$DB_NAME" -q \
      -v user="$USER_NAME" -v reader="$READER_NAME" -v db="$DB_NAME" -v password="$POSTGRES_READER_PASSWORD" \
      >/dev/null <<'SQL'
CREATE ROLE :"reader" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'password';
GRANT CONNECT ON DATABASE :"db" TO :"reader";
GRANT USAGE ON SCHEMA public TO :"reader";
ALTER DEFAULT PRIVILEGES FOR ROLE :"user" IN SCHEMA public GRANT SELECT ON TABLES TO :"reader";
SQL
  fi
  pg_ctl -D "$PGDATA" -w -m fast stop >/dev/null
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
  { echo "local all all trust"; hba_tcp_lines hostssl; } > "$hba"
  tls=(-c ssl=on -c ssl_cert_file="$POSTGRES_TLS_CERT_FILE" -c ssl_key_file="$key" -c hba_file="$hba")
  echo "sparkpoint-postgres: TLS on ($POSTGRES_TLS_CERT_FILE); TCP connections without it are refused"
fi

exec postgres -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories="$SOCKETS" "${tls[@]}" "$@"
