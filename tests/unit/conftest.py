import pytest

from controller.core.service import ControllerService
from tests.unit.fakes import FakeClock, new_service


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def service(clock, tmp_path) -> ControllerService:
    return new_service(clock, tmp_path)
