import pytest

from controller.core.service import ControllerService
from tests.unit.fakes import FakeClock, new_service


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def service(clock) -> ControllerService:
    return new_service(clock)
