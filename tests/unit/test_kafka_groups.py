"""Where a checkpointed batch of a Kafka query ended, read from Spark's
offsets log for the consumer-group commits (``worker.sources.kafka.groups``)."""

from __future__ import annotations

import json

from worker.sources.kafka.groups import batch_offsets


def test_the_kafka_sources_line_of_sparks_offsets_file_gives_the_batchs_ends(tmp_path):
    (tmp_path / "offsets").mkdir()
    metadata = {"batchWatermarkMs": 0, "batchTimestampMs": 1, "conf": {}}
    (tmp_path / "offsets" / "7").write_text("\n".join(
        ["v1", json.dumps(metadata), json.dumps({"trades": {"0": 12, "2": 30}, "quotes": {"1": 4}})]))
    assert batch_offsets(tmp_path, 7) == {("trades", 0): 12, ("trades", 2): 30, ("quotes", 1): 4}
    assert batch_offsets(tmp_path, 8) is None                       # not planned (or already cleaned up)
    (tmp_path / "offsets" / "9").write_text("\n".join(["v1", json.dumps(metadata), json.dumps({"0": 120})]))
    assert batch_offsets(tmp_path, 9) is None                       # the event log's line: not Kafka's
