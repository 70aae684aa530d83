"""Failure points of the fault sentinels (sparkpoint.faults): they raise
instead of killing, counting hits across the injectors Spark's Python
processes build (one per batch), once, every time with ``:always``, or
once per arming with ``:armed``."""

from __future__ import annotations

import pytest

from sparkpoint.faults import FaultInjector, InjectedFaultError


def hits_until_failure(spec: str, directory, tries: int = 10) -> list[int]:
    failed = []
    for attempt in range(1, tries + 1):
        try:
            FaultInjector(spec, directory).fail("staging.commit", f"batch {attempt}")     # a fresh one each time
        except InjectedFaultError as error:
            assert str(error) == f"fault staging.commit fired at batch {attempt} (SP_TEST_FAULT, hit {attempt})"
            failed.append(attempt)
    return failed


def test_a_failure_point_fires_once_at_the_nth_hit(tmp_path):
    assert hits_until_failure("staging.commit:3", tmp_path) == [3]
    assert (tmp_path / ".fault-staging.commit").exists()


def test_always_fires_at_every_hit_from_the_nth(tmp_path):
    assert hits_until_failure("staging.commit:2:always", tmp_path, tries=5) == [2, 3, 4, 5]


def test_other_points_and_kill_points_do_not_raise(tmp_path):
    FaultInjector("publish.files_placed", tmp_path).fail("staging.commit")
    FaultInjector("", tmp_path).fail("staging.commit")
    assert not list(tmp_path.iterdir())
    with pytest.raises(InjectedFaultError):
        FaultInjector("staging.commit", tmp_path).fail("staging.commit")


def test_armed_fires_once_per_arming(tmp_path):
    faults = FaultInjector("staging.commit:armed", tmp_path)
    arm = tmp_path / ".fault-staging.commit.arm"
    faults.fail("staging.commit", "batch 1")                     # not armed: no failure
    for batch in (2, 3):
        arm.touch()
        with pytest.raises(InjectedFaultError, match=f"fired at batch {batch} \\(SP_TEST_FAULT, armed\\)"):
            faults.fail("staging.commit", f"batch {batch}")
        assert not arm.exists()
        faults.fail("staging.commit", "the next batch")          # fired once per arming
    assert not (tmp_path / ".fault-staging.commit").exists()     # never done for good


def test_a_kill_point_named_after_a_sink_counts_only_that_sinks_hits(tmp_path, monkeypatch):
    killed = []
    monkeypatch.setattr("sparkpoint.faults.os.kill", lambda pid, sig: killed.append(sig))
    monkeypatch.setattr("sparkpoint.faults.os.killpg", lambda group, sig: killed.append(sig))
    faults = FaultInjector("publish.postgres_written@bars_pg:2", tmp_path)
    for _ in range(3):
        faults.hit("publish.postgres_written", "sectors_pg")      # another sink's publishes
    faults.hit("publish.postgres_written", "bars_pg")
    assert killed == []
    faults.hit("publish.postgres_written", "bars_pg")
    assert killed and (tmp_path / ".fault-publish.postgres_written@bars_pg").exists()
