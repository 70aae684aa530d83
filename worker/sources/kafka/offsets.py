"""Kafka offsets as Spark records them, and the decisions made on them (pure).

An offset is ``{"<topic>": {"<partition>": next_offset}}`` over the
partitions this worker owns (Spark's own Kafka source writes the same
shape): Spark records each batch's end in ``offsets/N`` before it runs,
so the checkpoint, not the consumer group, says where a restore resumes.

Planning a batch (``plan``), in the order the reader does it:

1. Reconcile the batch's start with what the broker holds now
   (``reconcile``): a partition that vanished, an offset below the
   partition's earliest (retention removed it) or above its latest (the
   topic was recreated) is data loss, reported; a partition that is new
   starts at its earliest.
2. Cap the batch (``spread``): ``cap`` records over the partitions with a
   backlog, in proportion to it, every one of them getting at least one
   while the cap allows, so none starves behind a busier one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

TopicPartition = tuple[str, int]
Offsets = dict[TopicPartition, int]


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    nested: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        nested.setdefault(topic, {})[str(partition)] = int(offset)
    return nested


def from_json(nested: Mapping[str, Mapping[str, int]]) -> Offsets:
    return {(topic, int(partition)): int(offset)
            for topic, partitions in nested.items() for partition, offset in partitions.items()}


@dataclass(frozen=True)
class DataLoss:
    """Records that a batch should have read and Kafka no longer holds."""

    topic: str
    partition: int
    expected: int           # the offset the batch starts from
    earliest: int | None    # the partition's earliest offset now (None: the partition is gone)
    latest: int | None

    def describe(self) -> str:
        where = f"topic {self.topic!r} partition {self.partition}"
        if self.earliest is None:
            return f"{where} vanished (the next offset to read was {self.expected})"
        if self.latest is not None and self.latest < self.expected:
            return (f"{where} went backwards: the next offset to read was {self.expected}, the partition now ends "
                    f"at {self.latest} (the topic was deleted and recreated?)")
        return (f"{where}: offsets {self.expected} to {self.earliest - 1} were removed before they were read "
                f"(retention); the partition now starts at {self.earliest}")


def reconcile(start: Mapping[TopicPartition, int], earliest: Mapping[TopicPartition, int],
              latest: Mapping[TopicPartition, int]) -> tuple[Offsets, list[DataLoss]]:
    """Step 1: where each partition the broker has now (``earliest`` and
    ``latest`` have the same keys) really starts, and what was lost. A lost
    range resumes at the partition's earliest offset, a vanished partition
    is dropped, a new one starts at its earliest."""
    resumed: Offsets = {}
    losses: list[DataLoss] = []
    for tp, offset in sorted(start.items()):
        if tp not in latest:
            losses.append(DataLoss(tp[0], tp[1], offset, None, None))
        elif latest[tp] < offset or earliest[tp] > offset:
            losses.append(DataLoss(tp[0], tp[1], offset, earliest[tp], latest[tp]))
            resumed[tp] = earliest[tp]
        else:
            resumed[tp] = offset
    for tp in sorted(latest):
        resumed.setdefault(tp, earliest[tp])
    return resumed, losses


def spread(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], cap: int | None) -> Offsets:
    """Step 2: each partition's end for a batch of at most ``cap`` records
    (None: no cap) from ``start`` toward ``latest``."""
    backlog = {tp: max(0, latest[tp] - offset) for tp, offset in start.items()}
    total = sum(backlog.values())
    if cap is None or total <= cap:
        return {tp: start[tp] + backlog[tp] for tp in start}
    waiting = sorted((tp for tp in backlog if backlog[tp]), key=lambda tp: (-backlog[tp], tp))
    # At least one record each while the cap allows, the rest in proportion to the backlog.
    taken = {tp: (1 if i < cap else 0) for i, tp in enumerate(waiting)}
    left = cap - sum(taken.values())
    rest = total - sum(taken.values())
    for tp in waiting:
        taken[tp] += (backlog[tp] - taken[tp]) * left // rest if rest else 0
    # What the rounding left over goes to the largest backlogs first.
    over = cap - sum(taken.values())
    for tp in waiting:
        if over <= 0:
            break
        extra = min(over, backlog[tp] - taken[tp])
        taken[tp] += extra
        over -= extra
    return {tp: start[tp] + taken.get(tp, 0) for tp in start}
