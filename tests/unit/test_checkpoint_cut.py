"""Which files of Spark's checkpoint directory form a consistent cut, the
latest committed batch, and the source offsets of an ``offsets/N`` file."""

from __future__ import annotations

import json

from worker.checkpointing.cut import committed_batch, list_files, parse_offsets, select_cut

# A query's working directory as Spark leaves it while batch 5 is in flight
# (offsets/5 written, commits/5 not yet; batch 5 writes state version 6).
SPARK_DIR = [
    "metadata", ".metadata.crc",
    *(f"offsets/{n}" for n in range(6)), *(f"offsets/.{n}.crc" for n in range(6)),
    *(f"commits/{n}" for n in range(5)), *(f"commits/.{n}.crc" for n in range(5)),
    *(f"state/0/0/{v}.delta" for v in range(1, 7)), *(f"state/0/0/.{v}.delta.crc" for v in range(1, 7)),
    "state/0/0/5.snapshot",
    "state/0/_metadata/metadata",
    "state/0/0/_metadata/schema",
    "sources/0/0",
    # RocksDB-backed store
    "state/0/1/3_abc.zip", "state/0/1/4.changelog", "state/0/1/6.changelog",
]


def test_cut_at_batch_4_leaves_out_the_batch_in_flight():
    cut = set(select_cut(SPARK_DIR, 4))
    assert "offsets/5" not in cut
    assert "state/0/0/6.delta" not in cut
    assert "state/0/1/6.changelog" not in cut


def test_cut_at_batch_4_holds_the_logs_and_state_up_to_it():
    cut = set(select_cut(SPARK_DIR, 4))
    assert {f"offsets/{n}" for n in range(5)} <= cut
    assert {f"commits/{n}" for n in range(5)} <= cut
    # batch 4 wrote state version 5
    assert {f"state/0/0/{v}.delta" for v in range(1, 6)} <= cut
    assert {"state/0/0/5.snapshot", "state/0/1/3_abc.zip", "state/0/1/4.changelog"} <= cut


def test_cut_holds_metadata_and_sources_but_no_crc_files():
    cut = select_cut(SPARK_DIR, 4)
    assert {"metadata", "state/0/_metadata/metadata", "state/0/0/_metadata/schema", "sources/0/0"} <= set(cut)
    assert not [path for path in cut if path.endswith(".crc")]


def test_cut_is_exactly_the_expected_set():
    expected = ({"metadata", "sources/0/0", "state/0/_metadata/metadata", "state/0/0/_metadata/schema",
                 "state/0/0/5.snapshot", "state/0/1/3_abc.zip", "state/0/1/4.changelog"}
                | {f"offsets/{n}" for n in range(5)} | {f"commits/{n}" for n in range(5)}
                | {f"state/0/0/{v}.delta" for v in range(1, 6)})
    assert set(select_cut(SPARK_DIR, 4)) == expected


def test_temporary_files_are_never_part_of_a_cut():
    paths = ["metadata", "offsets/0", "offsets/.1.3f2a.tmp", "state/0/0/.2.delta.9c1e.tmp"]
    assert select_cut(paths, 0) == ["metadata", "offsets/0"]


# --- committed_batch ----------------------------------------------------------------

def test_no_commits_dir_means_no_committed_batch(tmp_path):
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text("v1\n{}\n{}")
    assert committed_batch(tmp_path) is None


def test_empty_commits_dir_means_no_committed_batch(tmp_path):
    (tmp_path / "commits").mkdir()
    assert committed_batch(tmp_path) is None


def test_committed_batch_is_the_highest_commit_entry(tmp_path):
    commits = tmp_path / "commits"
    commits.mkdir()
    for name in ["0", "1", "10", "2", ".10.crc", ".11.abc.tmp"]:
        (commits / name).write_text("v1\n{}")
    assert committed_batch(tmp_path) == 10


def test_list_files_gives_relative_posix_paths(tmp_path):
    (tmp_path / "state" / "0" / "0").mkdir(parents=True)
    (tmp_path / "state" / "0" / "0" / "1.delta").write_bytes(b"x")
    (tmp_path / "metadata").write_text("{}")
    assert list_files(tmp_path) == ["metadata", "state/0/0/1.delta"]


# --- parse_offsets ---------------------------------------------------------------------

BATCH_METADATA = json.dumps({
    "batchWatermarkMs": 0, "batchTimestampMs": 1700000000123,
    "conf": {"spark.sql.shuffle.partitions": "4", "spark.sql.streaming.stateStore.providerClass":
             "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"},
}, separators=(",", ":"))


def test_parse_offsets_reads_the_source_line():
    text = f'v1\n{BATCH_METADATA}\n{{"0":120,"2":64}}'
    assert parse_offsets(text) == {"0": 120, "2": 64}


def test_parse_offsets_merges_several_sources_and_skips_empty_ones():
    text = f'v1\n{BATCH_METADATA}\n{{"0":120}}\n-\n{{"1":7}}\n'
    assert parse_offsets(text) == {"0": 120, "1": 7}


def test_parse_offsets_does_not_take_the_metadata_line_for_offsets():
    text = 'v1\n{"batchWatermarkMs":5,"batchTimestampMs":9}\n{"0":1}'
    assert parse_offsets(text) == {"0": 1}
