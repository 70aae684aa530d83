"""The chaos schedules (tests/chaos/schedule.py): the printed seed replays
the whole schedule, however often the scenario's probes poll."""

from __future__ import annotations

import random
import re

import pytest

from tests.chaos.schedule import Outages, WorkerCrash, drawn, outages, worker_crashes


@pytest.mark.parametrize("draw", [worker_crashes, outages])
def test_the_printed_seed_replays_the_whole_schedule(draw, monkeypatch, capsys):
    monkeypatch.delenv("SP_TEST_SEED", raising=False)
    first = drawn(draw)
    printed = capsys.readouterr().out
    seed = re.search(r"SP_TEST_SEED=(\d+)", printed).group(1)
    assert repr(first) in printed
    random.random()                     # draws elsewhere meanwhile change nothing
    monkeypatch.setenv("SP_TEST_SEED", seed)
    assert drawn(draw) == first


def test_the_schedules_stay_in_their_ranges():
    for seed in range(200):
        crashes = worker_crashes(random.Random(seed))
        assert len(crashes) == 2 and all(isinstance(c, WorkerCrash) and c.victim in (0, 1) and 1 <= c.batches <= 4
                                         for c in crashes)
        drawn_outages = outages(random.Random(seed))
        assert isinstance(drawn_outages, Outages) and drawn_outages.victim in (0, 1)
        assert len(drawn_outages.postgres_after) == 2 and all(1 <= n <= 6 for n in drawn_outages.postgres_after)
