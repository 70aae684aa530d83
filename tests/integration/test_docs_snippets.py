"""Every shell snippet the docs mark as runnable (``tests/docsnippets.py``),
run in page order as a user would type it, against a local stack: a
controller and a worker running the example pipeline over a generated log,
with checkpoints (a savepoint needs them). The snippets find the stack as
the docs tell users to point them at theirs: ``SP_CONTROLLER_URL`` and
``SP_API_TOKEN_FILE``; ``sparkpoint`` is the venv's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparkpoint.eventlog import EventLog
from sparkpoint.producer import write_trades
from tests.docsnippets import ROOT, snippets
from tests.support import wait_until, worker_status

pytestmark = pytest.mark.integration


def test_every_runnable_shell_snippet_of_the_docs_runs_against_a_local_stack(make_stack):
    stack = make_stack(workers=1, SP_CHECKPOINT_FREQ="1000", SP_TRIGGER_INTERVAL="500", SP_REPORT_INTERVAL="300")
    write_trades(EventLog.create(stack.config.log_dir / "trades", 2), 500, seed=5)
    stack.start_controller()
    stack.start_worker(0)
    wait_until(lambda: (w := worker_status(stack)) and w["state"] == "running" and w["last_checkpoint"],
               timeout_s=300, what="the worker running, a checkpoint complete")
    env = {**os.environ, "SP_CONTROLLER_URL": f"http://127.0.0.1:{stack.config.http_port}",
           "SP_API_TOKEN_FILE": str(stack.config.api_token_file),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    ran = []
    for snippet in snippets("sh"):
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", snippet.code], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, f"{snippet} exited {done.returncode}:\n{snippet.code}\n{done.stdout}{done.stderr}"
        assert done.stdout.strip(), f"{snippet} printed nothing"
        ran.append(str(snippet))
    assert len(ran) >= 3, ran
