"""Planning a Kafka batch (``worker.sources.kafka.offsets``): data loss
found and named, new partitions from their start, the cap spread over the
partitions by backlog with none starved."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from worker.sources.kafka.offsets import DataLoss, from_json, reconcile, spread, to_json

T = "trades"


def test_offsets_round_trip_through_spark_json():
    offsets = {(T, 0): 5, (T, 10): 7, ("other", 1): 0}
    assert to_json(offsets) == {"other": {"1": 0}, "trades": {"0": 5, "10": 7}}
    assert from_json(to_json(offsets)) == offsets


def test_reconcile_keeps_offsets_kafka_still_holds():
    resumed, losses = reconcile({(T, 0): 5}, {(T, 0): 0}, {(T, 0): 9})
    assert (resumed, losses) == ({(T, 0): 5}, [])


def test_reconcile_names_offsets_removed_by_retention_and_resumes_at_the_earliest():
    resumed, losses = reconcile({(T, 0): 5}, {(T, 0): 8}, {(T, 0): 20})
    assert resumed == {(T, 0): 8}
    assert losses == [DataLoss(T, 0, 5, 8, 20)]
    assert losses[0].describe() == ("topic 'trades' partition 0: offsets 5 to 7 were removed before they were read "
                                    "(retention); the partition now starts at 8")


def test_reconcile_names_a_partition_that_went_backwards():
    resumed, losses = reconcile({(T, 0): 50}, {(T, 0): 0}, {(T, 0): 3})
    assert resumed == {(T, 0): 0}
    assert "went backwards" in losses[0].describe() and "was 50" in losses[0].describe()


def test_reconcile_names_a_vanished_partition_and_drops_it():
    resumed, losses = reconcile({(T, 0): 5, (T, 1): 2}, {(T, 0): 0}, {(T, 0): 9})
    assert resumed == {(T, 0): 5}
    assert [loss.describe() for loss in losses] == [
        "topic 'trades' partition 1 vanished (the next offset to read was 2)"]


def test_reconcile_starts_a_new_partition_at_its_earliest_without_loss():
    resumed, losses = reconcile({(T, 0): 5}, {(T, 0): 0, (T, 1): 3}, {(T, 0): 9, (T, 1): 7})
    assert resumed == {(T, 0): 5, (T, 1): 3}
    assert losses == []


def test_spread_without_a_cap_reads_everything():
    assert spread({(T, 0): 1, (T, 1): 0}, {(T, 0): 9, (T, 1): 4}, None) == {(T, 0): 9, (T, 1): 4}


def test_spread_gives_a_small_backlog_its_share_beside_a_huge_one():
    ends = spread({(T, 0): 0, (T, 1): 0}, {(T, 0): 1_000_000, (T, 1): 1}, 100)
    assert ends == {(T, 0): 99, (T, 1): 1}


backlogs = st.dictionaries(st.integers(0, 15), st.tuples(st.integers(0, 1000), st.integers(0, 5000)),
                           min_size=1, max_size=8)


@given(backlogs, st.integers(1, 3000))
def test_spread_reads_exactly_the_cap_within_each_backlog_and_starves_none(partitions, cap):
    start = {(T, p): s for p, (s, _) in partitions.items()}
    latest = {(T, p): s + n for p, (s, n) in partitions.items()}
    ends = spread(start, latest, cap)
    taken = {tp: ends[tp] - start[tp] for tp in start}
    total = sum(latest[tp] - start[tp] for tp in start)
    assert sum(taken.values()) == min(cap, total)
    assert all(0 <= taken[tp] <= latest[tp] - start[tp] for tp in start)
    waiting = [tp for tp in start if latest[tp] > start[tp]]
    if cap >= len(waiting):
        assert all(taken[tp] >= 1 for tp in waiting), "a partition with a backlog got nothing"


def test_spread_shares_the_cap_in_proportion_to_the_backlogs():
    ends = spread({(T, 0): 0, (T, 1): 0, (T, 2): 0}, {(T, 0): 300, (T, 1): 100, (T, 2): 0}, 200)
    assert ends == {(T, 0): 150, (T, 1): 50, (T, 2): 0}


@given(backlogs, st.integers(1, 3000))
def test_spread_is_within_a_record_a_partition_of_the_proportional_share(partitions, cap):
    start = {(T, p): s for p, (s, _) in partitions.items()}
    latest = {(T, p): s + n for p, (s, n) in partitions.items()}
    total = sum(n for _, n in partitions.values())
    waiting = sum(1 for _, n in partitions.values() if n)
    assume(0 < cap < total)
    ends = spread(start, latest, cap)
    for tp in start:
        share = cap * (latest[tp] - start[tp]) / total
        assert abs((ends[tp] - start[tp]) - share) <= waiting + 1
