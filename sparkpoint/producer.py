"""Producer: appends trade events with unique ids to the event log, or,
with ``SP_PRODUCER_KAFKA_BOOTSTRAP``, produces them to a Kafka topic.

    python -m sparkpoint.producer        (settings from SP_PRODUCER_* variables)

Events are partitioned by symbol, so one symbol's state lives on one worker.
Ids continue from the number of records already in the log, so a restarted
producer never reuses one. In Kafka (``sparkpoint.kafka_producer``) they
continue after the largest id the topic holds.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

from pydantic import Field

from sparkpoint.eventlog import EventLog, partition_for_key, record_count
from sparkpoint.settings import HealthMaxAge, LogDir, Settings, SettingsError, exit_with_error

SYMBOLS = ("AAPL", "MSFT", "GOOG", "AMZN", "NVDA", "META", "TSLA", "IBM")
LATE_BY_S = 600         # how far behind the wall clock a late event is (SP_PRODUCER_LATE_FRACTION)


class ProducerSettings(Settings):
    program = "producer"

    log_dir: LogDir = Path("var/log")
    log_name: str = Field("trades", validation_alias="SP_PRODUCER_LOG", description="log to append to")
    partitions: int = Field(4, ge=1, le=1024, validation_alias="SP_PRODUCER_PARTITIONS",
                            description="partitions of a new log")
    rate: int = Field(200, ge=1, validation_alias="SP_PRODUCER_RATE", description="events per second",
                      json_schema_extra={"unit": "events per second"})
    count: int = Field(0, ge=0, validation_alias="SP_PRODUCER_COUNT",
                       description="stop after this many events (`0` = never)")
    seed: int = Field(1, validation_alias="SP_PRODUCER_SEED", description="random seed")
    disorder_s: float = Field(
        0.0, ge=0, le=3600, validation_alias="SP_PRODUCER_DISORDER",
        description="events out of order: each event's `time` is up to this many seconds before the wall clock "
                    "(uniformly drawn; `0` = in order)", json_schema_extra={"unit": "seconds"})
    late_fraction: float = Field(
        0.0, ge=0, le=1, validation_alias="SP_PRODUCER_LATE_FRACTION",
        description=f"this share of events is late: its `time` is {LATE_BY_S // 60} minutes before the wall "
                    "clock, past any watermark's lateness the example pipelines allow")
    kafka_bootstrap: str | None = Field(
        None, validation_alias="SP_PRODUCER_KAFKA_BOOTSTRAP",
        description="Kafka's bootstrap servers: produce to the topic `SP_PRODUCER_LOG` (created with "
                    "`SP_PRODUCER_PARTITIONS` partitions if missing) instead of appending to the event log")
    health_max_age_s: HealthMaxAge = Field(30, validation_alias="SP_HEALTH_MAX_AGE")


def trades(seed: int, first_id: int = 0, *, disorder_s: float = 0.0, late_fraction: float = 0.0) -> Iterator[dict]:
    """An endless, deterministic stream of trade events with ids from
    ``first_id``, stamped with the wall clock; ``disorder_s``: each up to
    that many seconds earlier (out of order); ``late_fraction``: that share
    ``LATE_BY_S`` earlier (late)."""
    rng = random.Random(seed * 1_000_003 + first_id)
    # Disorder draws from a generator of its own: the trades stay those of the seed.
    skew = random.Random(seed * 7_919 + first_id)
    prices = {sym: 100.0 + 10 * i for i, sym in enumerate(SYMBOLS)}
    event_id = first_id
    while True:
        sym = rng.choice(SYMBOLS)
        prices[sym] = max(1.0, prices[sym] * (1 + rng.gauss(0, 0.001)))
        stamp = datetime.now(timezone.utc)
        if disorder_s or late_fraction:
            behind = LATE_BY_S if skew.random() < late_fraction else skew.uniform(0, disorder_s)
            stamp -= timedelta(seconds=behind)
        yield {
            "id": event_id,
            "sym": sym,
            "price": round(prices[sym], 4),
            "size": rng.randint(1, 1000),
            "time": stamp.isoformat(timespec="microseconds").replace("+00:00", "Z"),
        }
        event_id += 1


def records_in(log: EventLog) -> int:
    """How many complete records the log holds (one pass over each partition, at start-up)."""
    return sum(record_count(log.path(partition)) for partition in range(log.partitions()))


def append_trades(log: EventLog, events: list[dict]) -> None:
    """Append events, grouped by partition, one write per partition."""
    partitions = log.partitions()
    by_partition: dict[int, list[dict]] = {}
    for event in events:
        by_partition.setdefault(partition_for_key(event["sym"], partitions), []).append(event)
    for partition, records in by_partition.items():
        log.append(partition, records)


def write_trades(log: EventLog, count: int, seed: int = 1) -> list[dict]:
    """Append ``count`` trades at once (tests and benchmarks); returns them."""
    generator = trades(seed, records_in(log))
    events = [next(generator) for _ in range(count)]
    append_trades(log, events)
    return events


class LogTarget:
    """Where the events go by default: the event log."""

    def __init__(self, settings: ProducerSettings) -> None:
        self.log = EventLog.create(settings.log_dir / settings.log_name, settings.partitions)
        self.description = str(self.log.directory)

    def next_id(self) -> int:
        return records_in(self.log)

    def append(self, events: list[dict]) -> None:
        append_trades(self.log, events)

    def close(self) -> None:
        pass


def run(settings: ProducerSettings) -> None:
    if settings.kafka_bootstrap:
        from sparkpoint.kafka_producer import KafkaTarget

        target = KafkaTarget(settings.kafka_bootstrap, settings.log_name, settings.partitions)
    else:
        target = LogTarget(settings)
    written = 0
    generator = trades(settings.seed, target.next_id(), disorder_s=settings.disorder_s,
                       late_fraction=settings.late_fraction)
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    tick = 0.1
    per_tick = max(1, round(settings.rate * tick))
    next_tick = time.monotonic()
    print(f"producer: appending {settings.rate} events/s to {target.description}", flush=True)
    try:
        while not stopping and (settings.count == 0 or written < settings.count):
            n = per_tick if settings.count == 0 else min(per_tick, settings.count - written)
            target.append([next(generator) for _ in range(n)])
            written += n
            next_tick += tick
            time.sleep(max(0.0, next_tick - time.monotonic()))
    finally:
        target.close()
    print(f"producer: wrote {written} events", flush=True)


def main() -> None:
    try:
        settings = ProducerSettings.from_env(os.environ)
        run(settings)
    except (SettingsError, OSError, ValueError) as error:
        exit_with_error("sparkpoint-producer", error)


if __name__ == "__main__":
    main()
