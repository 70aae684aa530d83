"""Producer health check: the event log $SP_LOG_DIR/$SP_PRODUCER_LOG was appended to recently.

Healthy while a partition file changed within SP_HEALTH_MAX_AGE seconds
(default 30), or once the producer has written its SP_PRODUCER_COUNT events.
"""

import os
import sys
import time
from pathlib import Path

log = Path(os.environ.get("SP_LOG_DIR", "var/log")) / os.environ.get("SP_PRODUCER_LOG", "trades")
max_age = float(os.environ.get("SP_HEALTH_MAX_AGE", "30"))
files = list(log.glob("p-*.jsonl"))
if not files:
    print(f"unhealthy: nothing written to {log} yet")
    sys.exit(1)
age = time.time() - max(f.stat().st_mtime for f in files)
if age > max_age and os.environ.get("SP_PRODUCER_COUNT", "0") in ("", "0"):
    print(f"unhealthy: {log} not appended to for {age:.0f}s")
    sys.exit(1)
print("healthy")
