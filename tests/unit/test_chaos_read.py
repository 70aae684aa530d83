"""The chaos suite reads a checkpoint volume through any worker container
that can exec; one that began restarting after it was listed is passed over."""

from __future__ import annotations

from types import SimpleNamespace

import docker.errors
import pytest
import requests

from tests.chaos.compose import ComposeStack


def api_error(status: int, explanation: str) -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = status
    return docker.errors.APIError("exec", response=response, explanation=explanation)


class Container:
    def __init__(self, name: str, *, output: str = "", error: docker.errors.APIError | None = None,
                 status: str = "running") -> None:
        self.name, self.output, self.error, self.status = name, output, error, status
        self.asked = 0

    def exec_run(self, command):
        self.asked += 1
        if self.error:
            raise self.error
        return SimpleNamespace(exit_code=0, output=self.output.encode())


RESTARTING = "Container 4e58 is restarting, wait until the container is running"


def test_a_container_restarting_since_it_was_listed_is_passed_over():
    restarting = Container("worker-0", error=api_error(409, RESTARTING))
    standby = Container("standby", output="held (pid 7 on 1a2b3c4d5e6f)\n")
    assert ComposeStack.read_from_a_worker("/LOCK", [restarting, standby]) == "held (pid 7 on 1a2b3c4d5e6f)\n"
    assert restarting.asked == 1


def test_no_container_that_can_read_is_named_with_each_ones_reason():
    with pytest.raises(AssertionError, match="worker-0: Container 4e58 is restarting"):
        ComposeStack.read_from_a_worker("/LOCK", [Container("worker-0", error=api_error(409, RESTARTING)),
                                                   Container("standby", status="paused")])


def test_other_docker_errors_are_raised():
    with pytest.raises(docker.errors.APIError, match="server error"):
        ComposeStack.read_from_a_worker("/LOCK", [Container("worker-0", error=api_error(500, "server error")),
                                                   Container("standby", output="x")])
