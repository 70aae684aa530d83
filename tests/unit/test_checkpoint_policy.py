"""Checkpoint bookkeeping (pure): when a checkpoint is due, which ones
retention keeps, which completions reach listeners, what a restore tries.
Time is a plain number passed in: no clock, no sleeps."""

from __future__ import annotations

import pytest

from worker.checkpointing.policy import (
    CheckpointScheduler,
    CompletionNotifier,
    Notified,
    Tick,
    TickResult,
    restore_candidates,
    retention_plan,
)

FREQ = 1000


# --- CheckpointScheduler -----------------------------------------------------------

def test_not_due_before_the_frequency_has_passed():
    scheduler = CheckpointScheduler(FREQ, now_ms=0)
    assert scheduler.tick(0).kind is Tick.NOT_DUE
    assert scheduler.tick(FREQ - 1).kind is Tick.NOT_DUE
    assert scheduler.in_flight is None


def test_due_at_the_frequency_with_the_next_id():
    scheduler = CheckpointScheduler(FREQ, now_ms=0, last_id=4)
    assert scheduler.tick(FREQ) == TickResult(Tick.DUE, 5)
    assert scheduler.in_flight == 5


def test_ids_strictly_increase_across_a_restart():
    first = CheckpointScheduler(FREQ, now_ms=0)
    ids = []
    for n in range(1, 4):
        result = first.tick(n * FREQ)
        ids.append(result.checkpoint_id)
        first.finished(result.checkpoint_id)
    # A restarted worker builds a new scheduler from the highest id it ever used.
    restarted = CheckpointScheduler(FREQ, now_ms=0, last_id=max(ids))
    result = restarted.tick(FREQ)
    assert ids == [1, 2, 3]
    assert result == TickResult(Tick.DUE, 4)


def test_a_tick_while_in_flight_is_dropped_and_counted_not_queued():
    scheduler = CheckpointScheduler(FREQ, now_ms=0)
    assert scheduler.tick(FREQ) == TickResult(Tick.DUE, 1)
    assert scheduler.tick(2 * FREQ) == TickResult(Tick.DROPPED)
    assert scheduler.dropped == 1
    scheduler.finished(1)
    # Finishing does not release the dropped one: nothing is due until the next interval.
    assert scheduler.tick(2 * FREQ + 1).kind is Tick.NOT_DUE
    assert scheduler.tick(3 * FREQ - 1).kind is Tick.NOT_DUE
    assert scheduler.tick(3 * FREQ) == TickResult(Tick.DUE, 2)
    assert scheduler.dropped == 1


def test_missed_intervals_do_not_produce_a_backlog():
    scheduler = CheckpointScheduler(FREQ, now_ms=0)
    scheduler.finished(scheduler.tick(FREQ).checkpoint_id)
    # The worker stalled for almost nine intervals: one checkpoint, not nine.
    assert scheduler.tick(10 * FREQ + 500) == TickResult(Tick.DUE, 2)
    scheduler.finished(2)
    assert scheduler.tick(10 * FREQ + 999).kind is Tick.NOT_DUE
    assert scheduler.tick(11 * FREQ) == TickResult(Tick.DUE, 3)
    assert scheduler.dropped == 0


def test_due_times_fall_at_the_phase_of_the_wall_clocks_intervals():
    # Monotonic 5,000 is wall 12,345,678: due at wall 12,346,400, 13,346,400, ...
    scheduler = CheckpointScheduler(FREQ, now_ms=5_000, wall_ms=12_345_678, phase_ms=400)
    assert scheduler.tick(5_000 + 721).kind is Tick.NOT_DUE
    assert scheduler.tick(5_000 + 722) == TickResult(Tick.DUE, 1)
    scheduler.finished(1)
    assert scheduler.tick(5_000 + 722 + FREQ - 1).kind is Tick.NOT_DUE
    assert scheduler.tick(5_000 + 722 + FREQ) == TickResult(Tick.DUE, 2)
    scheduler.finished(2)
    # After a stall the phase holds: the next due time is the next one of the grid.
    assert scheduler.tick(5_000 + 722 + 7 * FREQ + 300) == TickResult(Tick.DUE, 3)
    scheduler.finished(3)
    assert scheduler.tick(5_000 + 722 + 8 * FREQ - 1).kind is Tick.NOT_DUE
    assert scheduler.tick(5_000 + 722 + 8 * FREQ) == TickResult(Tick.DUE, 4)


def test_a_start_on_the_phase_waits_a_whole_interval():
    scheduler = CheckpointScheduler(FREQ, now_ms=0, wall_ms=3_400, phase_ms=400)
    assert scheduler.tick(FREQ - 1).kind is Tick.NOT_DUE
    assert scheduler.tick(FREQ) == TickResult(Tick.DUE, 1)


def test_start_takes_an_on_demand_checkpoint_outside_the_schedule():
    scheduler = CheckpointScheduler(FREQ, now_ms=0, last_id=7)
    assert scheduler.start() == TickResult(Tick.DUE, 8)
    assert scheduler.start() == TickResult(Tick.DROPPED)   # one in flight already
    assert scheduler.dropped == 1
    scheduler.finished(8)
    assert scheduler.start() == TickResult(Tick.DUE, 9)


def test_finishing_an_id_that_is_not_in_flight_changes_nothing():
    scheduler = CheckpointScheduler(FREQ, now_ms=0)
    scheduler.tick(FREQ)
    scheduler.finished(99)
    assert scheduler.in_flight == 1


def test_a_scheduler_needs_a_positive_frequency():
    with pytest.raises(ValueError):
        CheckpointScheduler(0, now_ms=0)


# --- retention_plan -------------------------------------------------------------------

def test_retention_keeps_the_newest_n():
    assert retention_plan([3, 1, 5, 2, 4], keep_last=2) == [1, 2, 3]


def test_retention_spares_pinned_checkpoints():
    assert retention_plan([1, 2, 3, 4, 5], keep_last=2, pinned=[2]) == [1, 3]


def test_retention_with_keep_last_above_the_count_deletes_nothing():
    assert retention_plan([1, 2, 3], keep_last=10) == []
    assert retention_plan([], keep_last=3) == []


# --- CompletionNotifier ---------------------------------------------------------------

def test_notifier_delivers_increasing_ids():
    notifier = CompletionNotifier()
    seen: list[int] = []
    notifier.subscribe(seen.append)
    assert notifier.complete(1) is Notified.DELIVERED
    assert notifier.complete(2) is Notified.DELIVERED
    assert seen == [1, 2]
    assert notifier.last_completed == 2


def test_late_and_duplicate_completions_are_subsumed_not_delivered():
    notifier = CompletionNotifier()
    seen: list[int] = []
    notifier.subscribe(seen.append)
    notifier.complete(3)
    assert notifier.complete(3) is Notified.SUBSUMED   # duplicate
    assert notifier.complete(2) is Notified.SUBSUMED   # late
    assert seen == [3]
    assert notifier.last_completed == 3


def test_skipped_ids_are_fine():
    notifier = CompletionNotifier()
    seen: list[int] = []
    notifier.subscribe(seen.append)
    notifier.complete(1)
    assert notifier.complete(3) is Notified.DELIVERED
    assert seen == [1, 3]


# --- restore_candidates ---------------------------------------------------------------

def test_restore_candidates_are_newest_first_from_the_chosen_one_down():
    assert restore_candidates([1, 2, 3, 4, 5], chosen=4) == [4, 3, 2, 1]


def test_restore_candidates_respect_the_floor():
    assert restore_candidates([1, 2, 3, 4, 5], chosen=5, floor=3) == [5, 4, 3]
    assert restore_candidates([1, 2], chosen=2, floor=3) == []


def test_no_chosen_checkpoint_means_nothing_to_try():
    assert restore_candidates([1, 2, 3], chosen=None) == []


def test_a_tick_with_nothing_to_checkpoint_hands_its_id_back():
    scheduler = CheckpointScheduler(1000, now_ms=0)
    first = scheduler.tick(1000)
    scheduler.finished(first.checkpoint_id, taken=False)   # no query had committed a batch yet
    second = scheduler.tick(2000)
    assert first.checkpoint_id == second.checkpoint_id == 1
    scheduler.finished(second.checkpoint_id)
    assert scheduler.tick(3000).checkpoint_id == 2
