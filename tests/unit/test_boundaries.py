"""The package layering holds: import-linter's contracts in pyproject.toml
(the CLI over the two services over the shared base; each service's own
layers; protobuf only at the gRPC edges; light imports where Spark forks)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_import_contracts_are_kept():
    result = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports; "
                             "raise SystemExit(lint_imports(no_cache=True, no_logo=True))"],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
