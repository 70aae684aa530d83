"""Kafka for the tests, without Docker: a throwaway broker from PyPI's
``noida-db`` (a Rust binary speaking Kafka's protocol, installed with the
dev dependencies) on 127.0.0.1, a free port and a private data directory.

``tests/integration/test_kafka_broker.py`` checks the guarantees of the
broker the Kafka tests rely on (transactions hidden from ``read_committed``
until committed, aborted ones never shown), so a broker that lost them
fails the suite instead of letting a sink test pass.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from sparkpoint.devstack import free_port

# What a client of this broker needs beyond librdkafka's defaults: it answers a
# fetch with up to a partition's whole backlog, ignoring the consumer's
# fetch.max.bytes, and librdkafka drops responses over receive.message.max.bytes
# (100 MB), retrying forever. Large backlogs only (benchmarks): the tests' are small.
CONSUMER_CONFIG = {"receive.message.max.bytes": "2000000000"}


def read_committed(bootstrap: str, topic: str, partitions: int) -> list[tuple[int, bytes | None, dict]]:
    """Every (partition, key, JSON value) a ``read_committed`` consumer is given, reading
    each partition from its start to its end in one pass (this broker answers
    a fetch with a partition's whole backlog, markers included: see
    ``test_kafka_broker`` for its fault with readers that start later)."""
    import json

    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "checker", "isolation.level": "read_committed",
                         "enable.partition.eof": True, "enable.auto.commit": False, **CONSUMER_CONFIG})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen, ended = [], set()
    try:
        for _ in range(300):
            for message in consumer.consume(500, timeout=0.2):
                if message.error() is None:
                    seen.append((message.partition(), message.key(), json.loads(message.value())))
                elif message.error().code() == KafkaError._PARTITION_EOF:
                    ended.add(message.partition())
            if len(ended) == partitions:
                return seen
    finally:
        consumer.close()
    raise AssertionError(f"never reached the end of every partition of {topic}: only of {sorted(ended)}")


def _binary() -> str:
    found = shutil.which("noida-db")
    if found is None:
        import noida_db

        found = str(Path(noida_db.__file__).parent / "noida-db")
    return found


class KafkaServer:
    """A broker in a temporary directory.

        server = KafkaServer().start()
        Producer({"bootstrap.servers": server.bootstrap})
        server.stop()                      # stops it and deletes its files
    """

    def __init__(self, *, timeout_s: float = 30.0) -> None:
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="sparkpoint-kafka-"))
        self.log_path = self.root / "broker.log"   # the broker's own output: print it when something fails
        self.timeout_s = timeout_s
        self._process: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> KafkaServer:
        with open(self.log_path, "ab") as out:
            self._process = subprocess.Popen(
                [_binary(), "start", "--only", "kafka", "--host", "127.0.0.1", "--kafka-port", str(self.port),
                 "--data-dir", str(self.root / "data")],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        """Until the broker answers a metadata request (not just accepts TCP)."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        deadline = time.monotonic() + self.timeout_s
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(f"the Kafka broker exited ({self._process.returncode}): {self.log()}")
            try:
                admin.list_topics(timeout=1.0)
                return
            except Exception:  # noqa: BLE001 - not up yet; bounded by the deadline
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the Kafka broker did not answer in {self.timeout_s} s: {self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Stop the broker with ``sig`` (its data stays: ``start`` brings it back
        on the same port). It saves its data about once a second: SIGTERM, a
        clean stop, keeps every acknowledged record; SIGKILL may lose the last second's."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(sig)
            self._process.wait(timeout=10)

    def stop(self) -> None:
        self.kill(signal.SIGKILL)
        shutil.rmtree(self.root, ignore_errors=True)

    def create_topic(self, topic: str, partitions: int) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})  # alive until the answer came
        futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
        futures[topic].result(timeout=self.timeout_s)
