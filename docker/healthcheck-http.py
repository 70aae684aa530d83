"""Controller health check: GET http://localhost:$SP_CONTROLLER_HTTP_PORT/health must answer {"status": "ok"}.

The port comes straight from the environment when set (the compose file
sets it): importing the settings classes would cost half a second of CPU at
every check. Unset, the settings give their default.
"""

import json
import os
import sys
import urllib.request

try:
    port = os.environ.get("SP_CONTROLLER_HTTP_PORT")
    if port is None:
        from controller.settings import ControllerSettings

        port = ControllerSettings.from_env(os.environ).http_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=4) as response:
        status = json.load(response).get("status")
except Exception as error:  # noqa: BLE001 - any failure is "unhealthy"
    print(f"unhealthy: {error}")
    sys.exit(1)
print("healthy" if status == "ok" else f"unhealthy: status {status!r}")
sys.exit(0 if status == "ok" else 1)
