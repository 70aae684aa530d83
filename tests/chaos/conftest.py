from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator

import pytest

from sparkpoint.devstack import free_port
from tests.chaos.compose import REPO, ComposeStack
from tests.support import body_failed

ARTIFACTS = REPO / "test-artifacts"


@pytest.fixture(scope="session")
def images() -> None:
    """Build the images once per run (cached: a warm build takes seconds)."""
    subprocess.run(["make", "images"], cwd=REPO, check=True)


@pytest.fixture(scope="session")
def kafka_images(images) -> None:
    """The kafka profile's broker image, once per run (cached likewise)."""
    subprocess.run(["make", "kafka-images"], cwd=REPO, check=True)


@pytest.fixture
def stack(images, request: pytest.FixtureRequest) -> Iterator:
    """A fresh compose project per test; containers and volumes removed
    afterwards, all containers' logs saved to test-artifacts/ if it failed."""
    stacks: list[ComposeStack] = []

    def build(files: tuple[str, ...] = (), **env: str) -> ComposeStack:
        compose = ComposeStack(f"spchaos{uuid.uuid4().hex[:8]}", env, free_port(), files)
        stacks.append(compose)
        return compose

    yield build
    failed = body_failed(request)
    for compose in stacks:
        if failed:
            compose.save_logs(ARTIFACTS / request.node.name)
            print(f"container logs saved under {ARTIFACTS / request.node.name}")
        compose.down()
