"""Producer health check: the event log $SP_LOG_DIR/$SP_PRODUCER_LOG was appended to recently.

Healthy while a partition file changed within SP_HEALTH_MAX_AGE seconds
(default 30), or once the producer has written its SP_PRODUCER_COUNT events.
"""

import os
import sys
import time

from sparkpoint.producer import ProducerSettings
from sparkpoint.settings import SettingsError

try:
    settings = ProducerSettings.from_env(os.environ)
except SettingsError as error:
    print(f"unhealthy: {error}")
    sys.exit(1)
log = settings.log_dir / settings.log_name
files = list(log.glob("p-*.jsonl"))
if not files:
    print(f"unhealthy: nothing written to {log} yet")
    sys.exit(1)
age = time.time() - max(f.stat().st_mtime for f in files)
if age > settings.health_max_age_s and settings.count == 0:
    print(f"unhealthy: {log} not appended to for {age:.0f}s")
    sys.exit(1)
print("healthy")
