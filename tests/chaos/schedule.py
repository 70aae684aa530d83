"""The chaos scenarios' schedules: drawn whole from one seed before a
scenario runs and printed with it, so ``SP_TEST_SEED=<seed>`` replays the
same crashes at the same points (nothing is drawn while probes poll)."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


def drawn(draw: Callable[[random.Random], T]) -> T:
    """The scenario's whole schedule, drawn from the seed (``SP_TEST_SEED``,
    else a random one) before anything runs, and printed with it."""
    seed = int(os.environ.get("SP_TEST_SEED", random.randrange(1 << 30)))
    schedule = draw(random.Random(seed))
    print(f"chaos schedule (SP_TEST_SEED={seed} replays it): {schedule}")
    return schedule


@dataclass(frozen=True)
class WorkerCrash:
    victim: int     # the worker crashed
    batches: int    # after this many more of its batches


def worker_crashes(rng: random.Random) -> tuple[WorkerCrash, ...]:
    return tuple(WorkerCrash(rng.randrange(2), rng.randint(1, 4)) for _ in range(2))


def lone_worker_crashes(rng: random.Random) -> tuple[WorkerCrash, ...]:
    """The shipped stack's one worker, crashed twice."""
    return tuple(WorkerCrash(0, rng.randint(1, 4)) for _ in range(2))


@dataclass(frozen=True)
class Takeovers:
    crashes: tuple[WorkerCrash, ...]    # each crashes the container running the victim's index
    mid_takeover: int                   # in this round, the standby taking over is crashed too, once registered


def takeovers(rng: random.Random) -> Takeovers:
    crashes = tuple(WorkerCrash(rng.randrange(2), rng.randint(1, 4)) for _ in range(3))
    return Takeovers(crashes, rng.randrange(len(crashes)))


@dataclass(frozen=True)
class Outages:
    postgres_after: tuple[int, ...]   # more batches published before each PostgreSQL crash
    victim: int                       # the worker crashed while the controller is down


def outages(rng: random.Random) -> Outages:
    return Outages(tuple(rng.randint(1, 6) for _ in range(2)), rng.randrange(2))
