"""Producer health check: the event log $SP_LOG_DIR/$SP_PRODUCER_LOG was appended to recently.

Healthy while a partition file changed within SP_HEALTH_MAX_AGE seconds
(default 30), or once the producer has written its SP_PRODUCER_COUNT events.
Producing to Kafka (SP_PRODUCER_KAFKA_BOOTSTRAP set), the file is the
heartbeat it touches after each acknowledged tick instead.

The four values come straight from the environment when all are set (the
compose file sets them): importing the settings classes would cost half a
second of CPU at every check. Otherwise the settings give the defaults.
"""

import os
import sys
import tempfile
import time
from pathlib import Path

NAMES = ("SP_LOG_DIR", "SP_PRODUCER_LOG", "SP_PRODUCER_COUNT", "SP_HEALTH_MAX_AGE")
# sparkpoint.kafka_producer.HEARTBEAT (not imported: it loads the Kafka client)
KAFKA_HEARTBEAT = Path(tempfile.gettempdir()) / "sparkpoint-producer-heartbeat"


def where() -> tuple[Path, float, int]:
    """The log, how old its newest append may be, and the events to write (0:
    never stops). Raises ``ValueError`` (``SettingsError``)."""
    if all(name in os.environ for name in NAMES):
        log_dir, log_name, count, max_age = (os.environ[name] for name in NAMES)
        return Path(log_dir) / log_name, float(max_age), int(count)
    from sparkpoint.producer import ProducerSettings

    settings = ProducerSettings.from_env(os.environ)
    return settings.log_dir / settings.log_name, settings.health_max_age_s, settings.count


try:
    log, max_age_s, count = where()
except ValueError as error:
    print(f"unhealthy: {error}")
    sys.exit(1)
if os.environ.get("SP_PRODUCER_KAFKA_BOOTSTRAP"):
    log, files = KAFKA_HEARTBEAT, [KAFKA_HEARTBEAT] if KAFKA_HEARTBEAT.exists() else []
else:
    files = list(log.glob("p-*.jsonl"))
if not files:
    print(f"unhealthy: nothing written to {log} yet")
    sys.exit(1)
age = time.time() - max(f.stat().st_mtime for f in files)
if age > max_age_s and count == 0:
    print(f"unhealthy: {log} not appended to for {age:.0f}s")
    sys.exit(1)
print("healthy")
sys.exit(0)
