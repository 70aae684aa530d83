"""The worker JVM's class archive (worker/runtime/classarchive.py): ``make
jars`` writes one the worker's session can map (a JVM made to insist on it,
``-Xshare:on``, starts), and an archive the JVM cannot use is skipped without
a word to the user. Each case starts a session in a process of its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from worker.runtime.session import CLASS_ARCHIVE, class_archive_options

pytestmark = pytest.mark.integration

SESSION = """
import sys, tempfile
from worker.runtime.session import start_session
from worker.settings import WorkerSettings
spark = start_session(WorkerSettings.from_env({"SP_WORK_DIR": tempfile.mkdtemp()}), java_options=sys.argv[1])
print("rows", spark.range(3).count())
spark.stop()
"""


def session_with(java_options: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SESSION, java_options], capture_output=True, text=True, timeout=300)


def test_the_worker_session_maps_the_archive_make_jars_wrote():
    assert CLASS_ARCHIVE.is_file(), "make jars writes it"
    assert class_archive_options() == f"-XX:SharedArchiveFile={CLASS_ARCHIVE}"
    # -Xshare:on: a JVM that cannot map the archive does not start.
    done = session_with(f"{class_archive_options()} -Xshare:on")
    assert done.returncode == 0 and "rows 3" in done.stdout, done.stderr[-3000:]


def test_an_archive_the_jvm_cannot_use_is_skipped_quietly(tmp_path: Path):
    # An archive of another class path (a bare `java -version`): as after an upgrade of Spark's jars.
    stale = tmp_path / "stale.jsa"
    subprocess.run(["java", f"-XX:ArchiveClassesAtExit={stale}", "-version"], capture_output=True, check=True)
    assert stale.is_file()
    done = session_with(f"-XX:SharedArchiveFile={stale}")
    assert done.returncode == 0 and "rows 3" in done.stdout, done.stderr[-3000:]
    assert "cds" not in (done.stdout + done.stderr).lower()
