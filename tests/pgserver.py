"""PostgreSQL for the tests, without Docker: a private throwaway cluster
(``PostgresServer``) run from Debian's server binaries (``make postgres-server``
installs them), and a TCP proxy (``CommitCutProxy``) that breaks connections at
the moment that matters to an exactly-once sink: the client's COMMIT.
"""

from __future__ import annotations

import enum
import os
import pwd
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from sparkpoint.devstack import free_port


def find_bindir() -> Path:
    """The directory holding initdb and pg_ctl: ``pg_config --bindir``, else the
    newest ``/usr/lib/postgresql/<version>/bin`` (on Debian, pg_config comes with
    libpq-dev and may name a version whose server is not installed)."""
    candidates = []
    try:
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True).stdout
        candidates.append(Path(out.strip()))
    except (OSError, subprocess.CalledProcessError):
        pass
    versions = Path("/usr/lib/postgresql").glob("*/bin")
    candidates += sorted(versions, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else -1, reverse=True)
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "pg_ctl").is_file():
            return bindir
    raise RuntimeError("no PostgreSQL server binaries (initdb, pg_ctl) found: run `make postgres-server`")


class PostgresServer:
    """A throwaway cluster in a temporary directory, listening on 127.0.0.1 on a
    free port, trusting every local TCP connection (user ``postgres``).

        server = PostgresServer().start()
        psycopg.connect(server.dsn)
        server.stop()                      # stops it and deletes its files
    """

    SUPERUSER = "postgres"

    def __init__(self, database: str = "sparkpoint", *, timeout_s: float = 60.0,
                 tls: tuple[Path, Path] | None = None):
        """``tls``: the server's certificate and key files: TLS on (plain TCP still accepted)."""
        self.database = database
        self.tls = tls
        self.timeout_s = timeout_s
        self.bindir = find_bindir()
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="sparkpoint-pg-"))
        self.data_dir = self.root / "data"
        self.log_path = self.root / "postgres.log"   # the server's own log: print it when something fails
        self._run_as: list[str] = []
        if os.geteuid() == 0:
            # initdb and postgres refuse to run as root: run them as Debian's
            # `postgres` user, which must own the directory they write in.
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError("running as root and no `postgres` user: run `make postgres-server`") from None
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self._run_as = ["runuser", "-u", "postgres", "--"]

    @property
    def dsn(self) -> str:
        """libpq conninfo of the test database."""
        return self.dsn_for(self.database)

    def dsn_for(self, database: str) -> str:
        return make_conninfo(host="127.0.0.1", port=self.port, user=self.SUPERUSER, dbname=database)

    def start(self) -> PostgresServer:
        self._pg("initdb", "-D", self.data_dir, "-U", self.SUPERUSER, "--auth=trust", "--encoding=UTF8",
                 "--no-locale", "--no-sync")
        with open(self.data_dir / "postgresql.conf", "a") as conf:
            conf.write(
                "\n# tests/pgserver.py\n"
                "listen_addresses = '127.0.0.1'\n"
                f"port = {self.port}\n"
                # Debian's default socket directory may be missing or shared: keep ours private.
                f"unix_socket_directories = '{self.root}'\n"
                # Throwaway data: a killed server loses nothing without fsync (the
                # page cache survives it); only a machine crash would.
                "fsync = off\n"
                "shared_buffers = 32MB\n"
                # Allow PREPARE TRANSACTION (two-phase commit), off by default.
                "max_prepared_transactions = 20\n"
            )
            if self.tls:
                conf.write(f"ssl = on\nssl_cert_file = '{self._private_copy(self.tls[0])}'\n"
                           f"ssl_key_file = '{self._private_copy(self.tls[1])}'\n")
        # -w: pg_ctl itself polls until the server accepts connections, bounded by -t.
        self._pg("pg_ctl", "start", "-w", "-t", str(int(self.timeout_s)), "-D", self.data_dir, "-l", self.log_path)
        with psycopg.connect(self.dsn_for("postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.database)))
        return self

    def _private_copy(self, path: Path) -> Path:
        """``path`` copied into the cluster's directory, 0600, owned by the
        server's user (PostgreSQL refuses a key others can read)."""
        copy = self.root / path.name
        shutil.copyfile(path, copy)
        os.chmod(copy, 0o600)
        owner = self.root.stat()
        os.chown(copy, owner.st_uid, owner.st_gid)
        return copy

    def restart(self, mode: str = "fast") -> None:
        """Restart the server on the same port and data; ``mode="immediate"`` is a
        crash as far as the database is concerned (recovery from WAL on start)."""
        self._pg("pg_ctl", "restart", "-w", "-t", str(int(self.timeout_s)), "-m", mode, "-D", self.data_dir,
                 "-l", self.log_path)

    def stop(self) -> None:
        """Stop the server and delete its files. Idempotent."""
        if (self.data_dir / "postmaster.pid").exists():
            self._pg("pg_ctl", "stop", "-w", "-t", str(int(self.timeout_s)), "-m", "fast", "-D", self.data_dir)
        shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "<no log>"

    def __enter__(self) -> PostgresServer:
        try:
            return self.start()
        except BaseException:
            self.stop()   # the error already carries the log's tail
            raise

    def __exit__(self, *exc) -> None:
        self.stop()

    def _pg(self, program: str, *args) -> None:
        command = [*self._run_as, str(self.bindir / program), *map(str, args)]
        # cwd: the unprivileged user may not be allowed into ours.
        done = subprocess.run(command, cwd=self.root, capture_output=True, text=True, timeout=self.timeout_s + 30)
        if done.returncode != 0:
            raise RuntimeError(f"{program} failed ({done.returncode}): {done.stdout}{done.stderr}\n"
                               f"--- {self.log_path} ---\n{self.log_tail()}")


class Cut(enum.Enum):
    BEFORE_SERVER = "before_server"   # COMMIT dropped: the transaction does not commit
    AFTER_SERVER = "after_server"     # COMMIT done, its reply dropped: committed, but the client cannot know


# Untyped requests a client may send before its StartupMessage.
_SSL_REQUEST, _GSSENC_REQUEST = 80877103, 80877104
# ReadyForQuery ('Z', length 5, status): the end of the server's reply to a query.
_READY_FOR_QUERY = b"Z\x00\x00\x00\x05"


def _simple_query(message: bytes) -> bytes | None:
    """A simple-query ('Q') message's text, upper-cased, without its ';'."""
    if message[:1] != b"Q":
        return None
    return message[5:].rstrip(b"\x00").strip().rstrip(b";").strip().upper()


def _is_commit(message: bytes) -> bool:
    """A simple-query COMMIT, as psycopg sends it (outside pipeline mode)."""
    return _simple_query(message) in (b"COMMIT", b"COMMIT TRANSACTION")


def _statement(message: bytes, prepared: dict[bytes, bytes]) -> bytes:
    """What a message runs, as text: a Parse ('P') records its statement's
    text under its name; a Bind ('B') of a prepared statement names it only
    (psycopg prepares a statement run often), so it gets the recorded text."""
    kind, body = message[:1], message[5:]
    if kind == b"P":
        name, _, rest = body.partition(b"\x00")
        prepared[name] = rest.partition(b"\x00")[0]
    elif kind == b"B":
        statement = body.partition(b"\x00")[2].partition(b"\x00")[0]
        return prepared.get(statement, b"")
    return message


def _ends_transaction(message: bytes) -> bool:
    """BEGIN, COMMIT or ROLLBACK as a simple query: what a transaction sent so far is forgotten."""
    text = _simple_query(message)
    return text is not None and text.split(b" ")[0] in (b"BEGIN", b"COMMIT", b"ROLLBACK")


class _FrontendFramer:
    """Splits the client->server byte stream into whole protocol messages (reads
    may split or merge them): untyped startup-phase messages first, then typed
    ones (type byte, int32 length counting itself)."""

    def __init__(self) -> None:
        self.buffer = b""
        self.startup = True

    def feed(self, data: bytes) -> list[tuple[bytes, bool]]:
        """Whole messages now available, each with whether it is an encryption request."""
        self.buffer += data
        messages = []
        while True:
            header = 0 if self.startup else 1
            if len(self.buffer) < header + 4:
                return messages
            (length,) = struct.unpack_from("!i", self.buffer, header)
            if len(self.buffer) < header + length:
                return messages
            message, self.buffer = self.buffer[:header + length], self.buffer[header + length:]
            encryption = False
            if self.startup:
                code = struct.unpack_from("!i", message, 4)[0] if length >= 8 else None
                encryption = code in (_SSL_REQUEST, _GSSENC_REQUEST)
                self.startup = encryption   # the StartupMessage (or a CancelRequest) ends the phase
            messages.append((message, encryption))


class _Connection:
    """One proxied connection: a pump thread each way."""

    def __init__(self, proxy: CommitCutProxy, client: socket.socket, server: socket.socket):
        self.proxy, self.client, self.server = proxy, client, server
        self.lock = threading.Lock()
        self.holding = False        # AFTER_SERVER: server->client bytes held back, looking for the reply
        self.held = b""
        self.pumps_left = 2

    def start(self) -> None:
        for target in (self._client_to_server, self._server_to_client):
            threading.Thread(target=self._pump, args=(target,), daemon=True).start()

    def cut(self) -> None:
        """Break both sides. shutdown (not close) wakes the pump threads blocked in
        recv; the last pump to exit closes the sockets."""
        for sock in (self.client, self.server):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _pump(self, target) -> None:
        try:
            target()
        except OSError:
            pass   # a side went away or was cut
        finally:
            self.cut()
            with self.lock:
                self.pumps_left -= 1
                last = self.pumps_left == 0
            if last:
                self.client.close()
                self.server.close()
                self.proxy._forget(self)

    def _client_to_server(self) -> None:
        framer = _FrontendFramer()
        sent: list[bytes] = []     # what this transaction ran so far, COPY data left out
        prepared: dict[bytes, bytes] = {}   # this connection's prepared statements: name -> text
        while data := self.client.recv(65536):
            for message, encryption in framer.feed(data):
                if encryption:
                    # Refuse TLS/GSS encryption on the server's behalf, so that
                    # the stream stays plaintext we can read (libpq then goes on
                    # unencrypted unless told to require it).
                    self.client.sendall(b"N")
                    continue
                cut = self.proxy._take_arming(b"".join(sent)) \
                    if not framer.startup and _is_commit(message) else None
                if _ends_transaction(message):
                    sent.clear()
                elif message[:1] != b"d":    # CopyData: rows, not statements
                    sent.append(_statement(message, prepared))
                if cut is Cut.BEFORE_SERVER:
                    return   # dropped: _pump cuts both sides
                if cut is Cut.AFTER_SERVER:
                    with self.lock:
                        self.holding = True
                self.server.sendall(message)

    def _server_to_client(self) -> None:
        while data := self.server.recv(65536):
            with self.lock:
                if self.holding:
                    # The client sent COMMIT only after the reply to its previous
                    # query (we are not in pipeline mode), so the first
                    # ReadyForQuery from here on ends the reply to COMMIT: the
                    # server has committed. Drop the reply and cut.
                    self.held += data
                    if _READY_FOR_QUERY in self.held:
                        return
                    continue
            self.client.sendall(data)


class CommitCutProxy:
    """A TCP proxy in front of a PostgreSQL server that, once armed, breaks the
    connection on which the client next sends COMMIT, then passes traffic
    through again:

        proxy = CommitCutProxy("127.0.0.1", server.port).start()
        conn = psycopg.connect(proxy.dsn_through(server.dsn))
        ...
        proxy.arm(Cut.AFTER_SERVER)
        conn.commit()                      # psycopg.OperationalError, yet committed
        proxy.stop()

    Only simple-query COMMITs are seen (psycopg's commit() and transaction()
    outside pipeline mode). ``cut_all()`` breaks every open connection, which is
    what a client sees when the server restarts.
    """

    BEFORE_SERVER = Cut.BEFORE_SERVER
    AFTER_SERVER = Cut.AFTER_SERVER

    def __init__(self, server_host: str, server_port: int):
        self.server_address = (server_host, server_port)
        self._listener = socket.create_server(("127.0.0.1", 0))   # port 0: the OS picks a free one
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._connections: set[_Connection] = set()
        self._armed: Cut | None = None
        self._only_after: bytes = b""   # cut only a transaction that sent this
        self.cuts = 0   # COMMITs cut so far
        self._accepting = threading.Thread(target=self._accept, daemon=True)

    def start(self) -> CommitCutProxy:
        self._accepting.start()
        return self

    def dsn_through(self, base_dsn: str) -> str:
        """``base_dsn`` with host and port pointing at this proxy, unencrypted (the
        proxy reads the protocol)."""
        params = conninfo_to_dict(base_dsn)
        params.pop("hostaddr", None)
        params.update(host="127.0.0.1", port=self.port, sslmode="disable")
        return make_conninfo(**params)

    def arm(self, cut: Cut, *, only_after: bytes = b"") -> None:
        """Cut the next COMMIT, on whichever connection sends it; with
        ``only_after``: the next COMMIT of a transaction that sent a message
        holding these bytes (a statement's text, e.g. the one UPDATE only a
        transactional sink's publish makes)."""
        with self._lock:
            self._armed = cut
            self._only_after = only_after

    def disarm(self) -> None:
        with self._lock:
            self._armed = None

    @property
    def armed(self) -> Cut | None:
        return self._armed

    def cut_all(self) -> None:
        """Break every open connection (new ones are accepted as usual)."""
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            connection.cut()

    def stop(self) -> None:
        try:
            self._listener.shutdown(socket.SHUT_RDWR)   # wakes the accept loop
        except OSError:
            pass
        self._listener.close()
        self.cut_all()
        if self._accepting.is_alive():
            self._accepting.join(timeout=5)

    def __enter__(self) -> CommitCutProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _take_arming(self, transaction: bytes) -> Cut | None:
        """The arming, used up, if it applies to a COMMIT of ``transaction``
        (what it sent before COMMIT)."""
        with self._lock:
            if self._only_after not in transaction:
                return None
            cut, self._armed = self._armed, None
            if cut is not None:
                self.cuts += 1
            return cut

    def _forget(self, connection: _Connection) -> None:
        with self._lock:
            self._connections.discard(connection)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return   # stopped
            try:
                server = socket.create_connection(self.server_address, timeout=10)
            except OSError:
                client.close()   # the client sees the server as down
                continue
            server.settimeout(None)
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection = _Connection(self, client, server)
            with self._lock:
                self._connections.add(connection)
            connection.start()
