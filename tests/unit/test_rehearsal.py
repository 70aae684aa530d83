"""When a standby's rehearsal of a query ends (worker/runtime/rehearsal.py)."""

from worker.runtime.rehearsal import BATCHES, RECORDS, rehearsed


def test_a_query_rehearses_its_batches_or_to_the_end_of_the_log():
    assert not rehearsed(None)                                                  # no batch yet
    assert not rehearsed({"batchId": BATCHES - 2, "numInputRows": RECORDS})    # full batches to go
    assert rehearsed({"batchId": BATCHES - 1, "numInputRows": RECORDS})
    assert rehearsed({"batchId": 0, "numInputRows": RECORDS - 1})               # the log has no more
