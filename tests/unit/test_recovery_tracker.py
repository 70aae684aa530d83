"""RecoveryTracker: how far a restored worker's replay has caught up with the
end of the log as it was at start (pure: statuses in, progress out)."""

from __future__ import annotations

from sparkpoint.messages import QueryProgress, Recovery
from worker.runtime.recovery import RecoveryTracker

# Restored at byte 100 of partition 0 and 0 of partition 1; the log then
# ended at 300 and 50: 250 bytes to replay.
RESTORED = {"0": 100, "1": 0}
TARGET = {"0": 300, "1": 50}


def query(name: str, **offsets: int) -> QueryProgress:
    return QueryProgress(name, batch_id=1, offsets={k.lstrip("p"): v for k, v in offsets.items()})


def test_active_before_any_query_reports():
    tracker = RecoveryTracker(RESTORED, TARGET)
    assert tracker.progress([]) == Recovery(active=True, target_bytes=250, replayed_bytes=0)


def test_replayed_bytes_follow_the_slowest_query():
    tracker = RecoveryTracker(RESTORED, TARGET)
    progress = tracker.progress([query("a", p0=250, p1=50), query("b", p0=150, p1=20)])
    # slowest: partition 0 at 150 (50 replayed), partition 1 at 20 (20 replayed)
    assert progress == Recovery(active=True, target_bytes=250, replayed_bytes=70)


def test_active_until_every_query_reaches_the_target():
    tracker = RecoveryTracker(RESTORED, TARGET)
    assert tracker.progress([query("a", p0=300, p1=50), query("b", p0=299, p1=50)]).active
    done = tracker.progress([query("a", p0=300, p1=50), query("b", p0=300, p1=50)])
    assert done == Recovery(active=False, target_bytes=250, replayed_bytes=250)


def test_reading_past_the_target_counts_as_caught_up():
    tracker = RecoveryTracker(RESTORED, TARGET)
    progress = tracker.progress([query("a", p0=900, p1=400)])
    assert progress == Recovery(active=False, target_bytes=250, replayed_bytes=250)


def test_stays_done_after_catching_up():
    tracker = RecoveryTracker(RESTORED, TARGET)
    tracker.progress([query("a", p0=300, p1=50)])
    # A query restarting, or reporting without offsets, does not reopen recovery.
    assert tracker.progress([query("a")]) == Recovery(False, 250, 250)
    assert tracker.progress([]) == Recovery(False, 250, 250)


def test_nothing_to_replay_is_not_recovering():
    tracker = RecoveryTracker({"0": 300}, {"0": 300})
    assert tracker.progress([]) == Recovery(active=False, target_bytes=0, replayed_bytes=0)


def test_starting_without_a_checkpoint_is_not_recovering():
    # worker.main passes the start offsets as the target when nothing was restored
    tracker = RecoveryTracker({}, {})
    assert not tracker.progress([query("a", p0=10)]).active


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_recovery_reports_when_it_started_and_how_long_it_took():
    clock = Clock(1010.0)
    tracker = RecoveryTracker(RESTORED, TARGET, started_at=1000.0, clock=clock)
    assert tracker.progress([query("a", p0=200, p1=50)]) == Recovery(True, 250, 150, 1000.0, 0.0)
    clock.now = 1012.5
    assert tracker.progress([query("a", p0=300, p1=50)]) == Recovery(False, 250, 250, 1000.0, 12500.0)
    clock.now = 1100.0                     # it took what it took: later reports say the same
    assert tracker.progress([query("a", p0=400, p1=50)]) == Recovery(False, 250, 250, 1000.0, 12500.0)


def test_a_restore_with_nothing_to_replay_is_a_recovery_that_ended_at_once():
    tracker = RecoveryTracker({"0": 300}, {"0": 300}, started_at=1000.0, clock=Clock(1002.0))
    assert tracker.progress([]) == Recovery(False, 0, 0, 1000.0, 2000.0)
