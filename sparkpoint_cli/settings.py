"""The CLI's settings: ``SP_*`` environment variables, parsed once in ``main``."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from sparkpoint.settings import ApiTokenFile, ForceGraphChange, SavepointDir, Settings
from sparkpoint_cli.controller_api import DEFAULT_URL


class CliSettings(Settings):
    program = "`sparkpoint` CLI"

    # An address, checked where it is used (with --controller it is not).
    controller_url: str = Field(DEFAULT_URL, description="the controller's REST address (or `--controller`)")
    force_graph_change: ForceGraphChange = False
    # `sparkpoint plan --from SAVEPOINT_ID` reads an exported or imported savepoint's manifests here.
    savepoint_dir: SavepointDir = Path("var/savepoints")
    api_token_file: ApiTokenFile = None
