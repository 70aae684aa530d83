"""Publish bookkeeping (pure): what a sink publishes when, under the
subsuming contract; what a restore keeps; complete mode; the immediate
contract; the restore floor. Plain numbers, no I/O."""

from __future__ import annotations

import pytest

from worker.publishing.book import Contract, Mark, PublishPlan, SinkBook, restore_floor


def transactional(complete: bool = False, mark: Mark | None = None) -> SinkBook:
    book = SinkBook(Contract.ON_COMPLETION, complete=complete)
    book.resume(mark)
    return book


# --- on checkpoint completion ------------------------------------------------------

def test_nothing_is_published_before_a_checkpoint_completes():
    book = transactional()
    book.durable(1, 3)
    assert book.plan([0, 1, 2, 3, 4]) == PublishPlan()


def test_completion_publishes_everything_staged_up_to_the_checkpoints_batch():
    book = transactional()
    book.durable(1, 3)
    book.complete_through(1)
    assert book.plan([0, 1, 2, 3, 4]) == PublishPlan((0, 1, 2, 3), Mark(1, 3))
    book.published(Mark(1, 3))
    # Published batches are discarded; batch 4 waits for a later checkpoint.
    assert book.plan([0, 1, 2, 3, 4]) == PublishPlan(discard=(0, 1, 2, 3))
    assert book.pending([4]) == 1


def test_a_skipped_notification_is_subsumed_by_the_next_completion():
    book = transactional()
    book.durable(1, 2)
    book.durable(2, 5)
    book.durable(3, 7)
    # "1 complete" and "2 complete" were lost; "3 complete" publishes all of it at once.
    book.complete_through(3)
    assert book.plan(range(9)) == PublishPlan((0, 1, 2, 3, 4, 5, 6, 7), Mark(3, 7))


def test_a_late_notification_changes_nothing():
    book = transactional()
    book.durable(1, 2)
    book.durable(2, 5)
    book.complete_through(2)
    book.published(book.plan(range(6)).mark)
    book.complete_through(1)     # arrives after 2
    assert book.completed == 2
    assert book.plan(range(6)) == PublishPlan(discard=(0, 1, 2, 3, 4, 5))


def test_completion_of_a_checkpoint_this_worker_never_saw_publishes_the_newest_durable_one_below_it():
    # The controller answers with the newest complete id it holds, which may be
    # one whose manifest this run never handed over.
    book = transactional()
    book.durable(4, 10)
    book.complete_through(6)
    assert book.plan(range(12)).mark == Mark(4, 10)


def test_an_aborted_checkpoint_discards_nothing():
    book = transactional()
    book.durable(1, 2)
    # Checkpoint 2 failed (never durable): its batches stay staged, and the
    # next checkpoint that completes covers them.
    book.durable(3, 6)
    book.complete_through(3)
    assert book.plan(range(7)) == PublishPlan((0, 1, 2, 3, 4, 5, 6), Mark(3, 6))


def test_a_cut_without_new_batches_publishes_nothing():
    book = transactional(mark=Mark(2, 5))
    book.durable(3, 5)
    book.complete_through(3)
    assert book.plan([]) == PublishPlan()


def test_a_cut_past_batches_that_left_nothing_staged_still_moves_the_mark():
    book = transactional(mark=Mark(2, 5))
    book.durable(3, 8)
    book.complete_through(3)
    assert book.plan([]) == PublishPlan((), Mark(3, 8))


@pytest.mark.parametrize("recorded, then", [
    (Mark(1, 3), PublishPlan(discard=(0, 1, 2, 3))),          # it committed: nothing to redo
    (None, PublishPlan((0, 1, 2, 3), Mark(1, 3))),             # it did not: the same batches again
])
def test_an_ambiguous_commit_is_resolved_by_the_targets_mark(recorded, then):
    book = transactional()
    book.durable(1, 3)
    book.complete_through(1)
    assert book.plan(range(4)).mark == Mark(1, 3)
    # The connection broke during COMMIT; the mark read back decides.
    book.resume(recorded)
    assert book.plan(range(4)) == then


def test_cuts_at_or_below_the_mark_are_ignored():
    book = transactional(mark=Mark(5, 20))
    book.durable(4, 18)
    book.complete_through(5)
    assert book.plan(range(18, 22)) == PublishPlan(discard=(18, 19, 20))


# --- restore ------------------------------------------------------------------------

def test_the_restored_checkpoint_counts_as_complete():
    # Staged before the crash, up to the restored checkpoint: published right away.
    book = transactional(mark=Mark(2, 4))
    book.restored(3, 7)
    assert book.plan([5, 6, 7]) == PublishPlan((5, 6, 7), Mark(3, 7))


def test_batches_staged_before_the_mark_are_discarded_unpublished():
    # Published before the crash but not yet deleted from staging.
    book = transactional(mark=Mark(3, 7))
    book.restored(3, 7)
    assert book.plan([6, 7]) == PublishPlan(discard=(6, 7))


def test_the_restore_floor_is_the_newest_published_checkpoint():
    assert restore_floor([None, Mark(4, 10), Mark(7, 12)]) == 7
    assert restore_floor([None]) is None
    assert restore_floor([Mark(0, 30)]) is None     # published without checkpoints


# --- complete mode (aggregations: every batch is the whole table) -------------------------

def test_complete_mode_publishes_only_the_newest_table_up_to_the_cut():
    book = transactional(complete=True)
    book.durable(1, 4)
    book.complete_through(1)
    # Tables 2 and 3 are superseded by 4.
    assert book.plan([2, 3, 4, 5]) == PublishPlan((4,), Mark(1, 4), discard=(2, 3))
    book.published(Mark(1, 4))
    assert book.plan([2, 3, 4, 5]) == PublishPlan(discard=(2, 3, 4))


def test_complete_mode_prunes_tables_no_cut_needs():
    book = transactional(complete=True)
    book.durable(1, 3)
    book.durable(2, 6)
    # Nothing completed yet (controller down): tables 3 and 6 serve the two
    # cuts, 7 and 8 a checkpoint still to come; 1, 2, 4 and 5 are superseded.
    assert book.plan(range(1, 9)) == PublishPlan(discard=(1, 2, 4, 5))


def test_complete_mode_with_no_staged_table_in_range_moves_the_mark_only():
    book = transactional(complete=True, mark=Mark(1, 4))
    book.durable(2, 6)
    book.complete_through(2)
    assert book.plan([4, 7]) == PublishPlan((), Mark(2, 6), discard=(4,))


# --- immediate (upserts; files with checkpoints off) ------------------------------------

def test_immediate_publishes_every_staged_batch_at_once_and_ignores_checkpoints():
    book = SinkBook(Contract.IMMEDIATE, complete=False)
    assert book.plan([0, 1, 2]) == PublishPlan((0, 1, 2), Mark(0, 2))
    book.published(Mark(0, 2))
    book.durable(1, 1)
    book.complete_through(1)
    assert book.plan([0, 1, 2, 3]) == PublishPlan((3,), Mark(0, 3), discard=(0, 1, 2))


def test_immediate_complete_mode_publishes_the_newest_table_only():
    book = SinkBook(Contract.IMMEDIATE, complete=True)
    assert book.plan([3, 4, 5]) == PublishPlan((5,), Mark(0, 5))
    book.published(Mark(0, 5))
    assert book.plan([3, 4, 5]) == PublishPlan(discard=(3, 4, 5))


def test_immediate_keeps_its_own_mark_not_an_earlier_runs():
    # A restart without checkpoints numbers batches from 0 again, below the
    # mark an earlier run recorded: they are published all the same.
    book = SinkBook(Contract.IMMEDIATE, complete=False)
    book.resume(Mark(0, 50))
    assert book.plan([0, 1]) == PublishPlan((0, 1), Mark(0, 1))
