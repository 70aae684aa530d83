import json
import subprocess
import sys
from pathlib import Path

from worker.healthcheck import FILE_NAME, check, where, write_health

REPO = Path(__file__).resolve().parents[2]


def test_healthy_only_when_registered_alive_and_recent(tmp_path):
    assert check(tmp_path, 30, now=0) == "not started yet (no health file)"
    write_health(tmp_path, registered=True, queries_alive=True, state="WORKER_STATE_RUNNING")
    written = json.loads((tmp_path / FILE_NAME).read_text())["updated_at"]
    assert check(tmp_path, 30, now=written + 5) is None
    assert check(tmp_path, 30, now=written + 31) == "no progress report for 31s"
    write_health(tmp_path, registered=True, queries_alive=False, state="WORKER_STATE_FAILED")
    assert "queries not running" in check(tmp_path, 30, now=written)
    write_health(tmp_path, registered=False, queries_alive=True, state="WORKER_STATE_STARTING")
    assert check(tmp_path, 30, now=written) == "not registered with the controller"


def test_command_exit_status(tmp_path):
    def run() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "worker.healthcheck"], cwd=REPO, capture_output=True, text=True,
                              env={"SP_WORK_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert run().returncode == 1
    write_health(tmp_path, registered=True, queries_alive=True, state="WORKER_STATE_RUNNING")
    result = run()
    assert (result.returncode, result.stdout.strip()) == (0, "healthy")


def test_the_check_imports_no_settings_when_the_compose_file_gives_both_values(tmp_path):
    """A check runs every 10 s in every worker container: the settings
    classes (pydantic, psycopg) would cost 0.6 s of CPU each time."""
    write_health(tmp_path, registered=True, queries_alive=True, state="WORKER_STATE_RUNNING")
    probe = ("import sys\nfrom worker import healthcheck\ntry:\n    healthcheck.main()\nexcept SystemExit as end:\n"
             "    print(end.code, sorted(m for m in ('pydantic', 'psycopg', 'worker.settings') if m in sys.modules))\n")
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True,
                            env={"SP_WORK_DIR": str(tmp_path), "SP_HEALTH_MAX_AGE": "30", "PATH": "/usr/bin:/bin"})
    assert result.stdout.splitlines()[-1] == "0 []"
    assert where({"SP_WORK_DIR": str(tmp_path), "SP_HEALTH_MAX_AGE": "12.5"}) == (tmp_path, 12.5)
    assert where({"SP_WORK_DIR": str(tmp_path)}) == (tmp_path, 30)      # the settings' default


def test_a_restarted_worker_clears_the_old_health_file(tmp_path):
    from worker.healthcheck import clear_health

    write_health(tmp_path, registered=True, queries_alive=True, state="WORKER_STATE_RUNNING")
    clear_health(tmp_path)
    assert check(tmp_path, 30, now=0) == "not started yet (no health file)"


def test_a_standby_is_healthy_while_it_keeps_saying_so(tmp_path):
    from worker.healthcheck import standing_by

    standing_by(tmp_path)
    written = json.loads((tmp_path / FILE_NAME).read_text())["updated_at"]
    assert check(tmp_path, 30, now=written + 5) is None
    assert check(tmp_path, 30, now=written + 31) == "standby silent for 31s"
