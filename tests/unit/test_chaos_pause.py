"""The chaos suite's pause: runc's "unable to freeze" is tried again, nothing else."""

from __future__ import annotations

import docker.errors
import pytest

from tests.chaos.compose import ComposeStack


class FlakyContainer:
    def __init__(self, *errors: str) -> None:
        self.errors = list(errors)
        self.paused = 0

    def pause(self) -> None:
        if self.errors:
            raise docker.errors.APIError(self.errors.pop(0))
        self.paused += 1


def stack_of(container: FlakyContainer) -> ComposeStack:
    stack = ComposeStack.__new__(ComposeStack)     # no Docker: only the container is faked
    stack.container = lambda service: container
    return stack


FREEZE = "Cannot pause container 1a: OCI runtime pause failed: unable to freeze: unknown"


def test_a_freeze_that_gave_up_is_tried_again():
    container = FlakyContainer(FREEZE, FREEZE)
    stack_of(container).pause("worker-0")
    assert container.paused == 1


def test_other_errors_and_a_freezer_that_keeps_failing_are_raised():
    with pytest.raises(docker.errors.APIError, match="is not running"):
        stack_of(FlakyContainer("Container 1a is not running")).pause("worker-0")
    stuck = FlakyContainer(*[FREEZE] * 5)
    with pytest.raises(docker.errors.APIError, match="unable to freeze"):
        stack_of(stuck).pause("worker-0", attempts=5)
    assert stuck.paused == 0
