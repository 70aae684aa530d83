from pathlib import Path

import pytest

from controller.core.service import ControllerService
from tests.unit.fakes import FakeClock, new_service
from tests.unit.savepoint_support import Pipeline, running_pipeline


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def service(clock, tmp_path) -> ControllerService:
    return new_service(clock, tmp_path)


@pytest.fixture
def pipeline(service) -> Pipeline:
    """Both workers of ``service`` registered, with checkpoints 4 and 9 committed."""
    return running_pipeline(service)


@pytest.fixture
def savepoint_root(tmp_path) -> Path:
    """The savepoint root (SP_SAVEPOINT_DIR) of ``service``."""
    return tmp_path / "savepoints"
