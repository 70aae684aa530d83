"""The docs: the site builds with ``mkdocs build --strict`` (a broken link, a
missing page or a page left out of the nav fails), the README stays a short
front door whose links resolve, and every Python snippet marked runnable
(``tests/docsnippets.py``) is a pipeline that loads. The shell snippets run
against a local stack: ``tests/integration/test_docs_snippets.py``."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.docsnippets import MARK, ROOT, snippets
from worker.api.loader import load_pipeline


def test_the_site_builds_strictly(tmp_path):
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                           cwd=ROOT, capture_output=True, text=True, timeout=300,
                           env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0, built.stderr[-4000:]
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    for documented in ("_Read.from_kafka", "_Write.to_postgres", "worker.api.aggregate"):   # from the docstrings
        assert f'id="worker.api.{documented.removeprefix("worker.api.")}"' in api


def test_the_readme_is_a_short_front_door_whose_links_resolve():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert links and all((ROOT / link).exists() for link in links if not link.startswith("http")), links
    assert not re.search(r"stack-200-\d|bench/results/", readme), "measurements belong in docs/benchmarks.md"


def test_runnable_snippets_exist_and_a_mark_without_a_block_is_refused(tmp_path, monkeypatch):
    assert len(snippets("python")) >= 2 and len(snippets("sh")) >= 3
    page = tmp_path / "page.md"
    page.write_text(f"{MARK}\n    sparkpoint status\n")
    monkeypatch.setattr("tests.docsnippets.PAGES", [page])
    monkeypatch.setattr("tests.docsnippets.ROOT", tmp_path)
    with pytest.raises(ValueError, match="page.md:1: <!-- runnable --> must be followed by a fenced block"):
        snippets("sh")


@pytest.mark.parametrize("snippet", snippets("python"), ids=str)
def test_each_runnable_python_snippet_is_a_pipeline_that_loads(snippet, tmp_path):
    path = tmp_path / "pipeline.py"
    path.write_text(snippet.code)
    pipeline = load_pipeline(path)
    assert pipeline.queries(), f"{snippet}: no query"
