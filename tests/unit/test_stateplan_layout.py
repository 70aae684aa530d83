"""Layouts (what a query's state looks like, by node name), as built from a
pipeline, recorded in manifests, and the Spark files a remapped restore
needs. No Spark session: schemas are built by hand."""

from __future__ import annotations

import json

import pytest
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from tests.unit.test_checkpoint_writer_restore import FakeQuery
from worker import api as sp
from worker.checkpointing.layout import Column, QueryLayout, StatefulNode, StateSchema
from worker.checkpointing.manifest import FileEntry, Manifest, ManifestError, QueryCut
from worker.checkpointing.store import CheckpointStore
from worker.checkpointing.writer import CheckpointWriter
from worker.stateplan.derive import aggregate_schema
from worker.stateplan.layout import checkpoint_layout, pipeline_layout
from worker.stateplan.remap import EmptyState
from worker.stateplan.sparkfiles import (
    EMPTY_LZ4_SNAPSHOT,
    UnsupportedStateStore,
    empty_state_files,
    pinned_conf,
    stream_metadata,
)

SCHEMA = StateSchema((Column("sym", "string"),), (Column("volume", "bigint", "sum(size)"),))
SEEN = StateSchema((Column("id", "bigint"),), ())


def trades_pipeline(**source_options):
    trades = sp.read.from_log("trades", schema="id long, sym string, size long", name="trades", **source_options)
    return sp.Pipeline.of(
        trades | sp.map(lambda df: df, name="enrich") | sp.write.to_files("enriched", name="enriched_out"),
        trades | sp.aggregate("id", {"n": "count(1)"}, name="dedupe")
        | sp.aggregate("sym", {"volume": "sum(size)"}, name="vwap_state") | sp.write.to_files("vwap", name="vwap_out"),
    )


def test_operator_ids_count_from_the_sink_up():
    layout = QueryLayout("s", "x", tuple(StatefulNode(n, SEEN) for n in ("first", "middle", "last")))
    assert layout.operator_ids() == {"first": 2, "middle": 1, "last": 0}


def test_a_pipeline_layout_has_one_query_per_sink_with_its_stateful_nodes_in_branch_order():
    pipeline = trades_pipeline()
    layout = pipeline_layout(pipeline, {"dedupe": SEEN, "vwap_state": SCHEMA})
    assert layout.fingerprint == pipeline.fingerprint()
    assert layout.node_names == ("trades", "enrich", "enriched_out", "dedupe", "vwap_state", "vwap_out")
    assert layout.queries["enriched_out"] == QueryLayout("trades", 'source.log:{"log":"trades"}', (), ("enriched_out",))
    assert layout.queries["vwap_out"].stateful == (StatefulNode("dedupe", SEEN), StatefulNode("vwap_state", SCHEMA))


def test_a_source_is_the_same_input_whatever_its_schema_or_batch_cap():
    plain = pipeline_layout(trades_pipeline(), {"dedupe": SEEN, "vwap_state": SCHEMA})
    capped = pipeline_layout(trades_pipeline(max_records_per_batch=10), {"dedupe": SEEN, "vwap_state": SCHEMA})
    assert plain.queries == capped.queries


def test_a_kafka_source_is_the_same_input_whatever_its_start_data_loss_choice_metadata_or_cap():
    def identity(topics="trades", **options):
        source = sp.read.from_kafka(topics, schema="id long", name="trades", **options)
        return pipeline_layout(sp.Pipeline.of(source | sp.write.to_files("out", name="out")), {}).queries["out"]

    plain = identity()
    assert plain.source_identity == 'source.kafka:{"topics":["trades"]}'
    assert identity(starting_offsets="latest", fail_on_data_loss=False, metadata=["offset"],
                    max_records_per_batch=5, bounded=True) == plain
    assert identity(["trades", "quotes"]).source_identity != plain.source_identity


def test_aggregate_schema_takes_the_key_and_value_columns_from_the_output_schema():
    node = sp.aggregate("sym", {"notional": "sum(price *\n   size)", "volume": "sum(size)"}, name="vwap_state").node
    output = StructType([StructField("sym", StringType()), StructField("notional", DoubleType()),
                         StructField("volume", LongType())])
    assert aggregate_schema(node, output) == StateSchema(
        (Column("sym", "string"),),
        (Column("notional", "double", "sum(price * size)"), Column("volume", "bigint", "sum(size)")))


def manifest(queries: tuple[QueryCut, ...], finished: tuple[str, ...] = ()) -> Manifest:
    return Manifest(checkpoint_id=3, worker_id="worker-0", created_at=1.0, duration_ms=2.0, bytes_copied=0,
                    node_names=("trades", "vwap_state", "vwap_out"), queries=queries, pipeline_fingerprint="fp",
                    finished_nodes=finished)


def test_a_manifest_records_each_query_layout_and_its_finished_nodes():
    layout = QueryLayout("trades", "source.log:{}", (StatefulNode("vwap_state", SCHEMA),), ("vwap_out",))
    written = manifest((QueryCut("vwap_out", 4, {"0": 9}, {"offsets/4": FileEntry("ab" * 32, 5)}, layout),),
                       finished=("trades",))
    read = Manifest.from_json(written.to_json(), "m.json")
    assert read == written
    recorded = checkpoint_layout(read)
    assert recorded.queries == {"vwap_out": layout}
    assert (recorded.batches, recorded.finished, recorded.fingerprint) == ({"vwap_out": 4}, {"trades"}, "fp")


def test_a_manifest_written_before_layouts_still_loads_without_one():
    data = json.loads(manifest((QueryCut("vwap_out", 4, {}, {}),)).to_json())
    for query in data["queries"]:
        del query["layout"]
    del data["finished_nodes"]
    read = Manifest.from_json(json.dumps(data), "old.json")
    assert read.queries[0].layout is None and read.finished_nodes == ()
    assert checkpoint_layout(read) is None


def test_a_malformed_layout_is_a_manifest_error_naming_the_file():
    data = json.loads(manifest((QueryCut("vwap_out", 4, {}, {}),)).to_json())
    data["queries"][0]["layout"] = {"source": "trades"}
    with pytest.raises(ManifestError, match=r"^bad\.json: not a valid checkpoint manifest \(KeyError"):
        Manifest.from_json(json.dumps(data), "bad.json")


def test_the_writer_records_the_layout_of_each_query(tmp_path):
    layout = QueryLayout("src", "source.log:{}", (StatefulNode("counts_state", SEEN),))
    query_root = tmp_path / "queries"
    FakeQuery(query_root, "counts").batch(0)
    writer = CheckpointWriter(CheckpointStore(tmp_path / "store"), query_root, "w0", ("src", "counts"), "fp",
                              layouts={"counts": layout})
    assert writer.take(1).queries[0].layout == layout


OFFSETS = ('v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{"spark.sql.shuffle.partitions":"2",'
           '"spark.sql.streaming.stateStore.compression.codec":"lz4"}}\n{"0":120}')


def test_a_new_query_id_is_written_as_spark_writes_it():
    assert stream_metadata("2d3c6e0a-7f1e-4c55-9d0a-1b2c3d4e5f60") == b'{"id":"2d3c6e0a-7f1e-4c55-9d0a-1b2c3d4e5f60"}'


def test_pinned_conf_reads_the_settings_of_an_offsets_file():
    assert pinned_conf(OFFSETS) == {"spark.sql.shuffle.partitions": "2",
                                    "spark.sql.streaming.stateStore.compression.codec": "lz4"}
    with pytest.raises(ValueError, match="^vwap_out/offsets/4: not a Spark offsets file"):
        pinned_conf("v1\n", "vwap_out/offsets/4")


def test_an_empty_state_is_an_empty_snapshot_in_every_pinned_partition():
    files = empty_state_files(EmptyState("vwap_out", 1, 8), pinned_conf(OFFSETS))
    assert files == {"state/1/0/8.snapshot": EMPTY_LZ4_SNAPSHOT, "state/1/1/8.snapshot": EMPTY_LZ4_SNAPSHOT}


def test_the_empty_snapshot_is_one_raw_lz4_block_holding_the_end_marker_then_the_end_block():
    # lz4-java block: magic, token (raw, 32 KiB blocks), compressed and
    # original lengths (little-endian), checksum, data.
    block, end = EMPTY_LZ4_SNAPSHOT[:25], EMPTY_LZ4_SNAPSHOT[25:]
    assert block[:9] == b"LZ4Block\x15" and end[:9] == b"LZ4Block\x15"
    assert block[9:17] == (4).to_bytes(4, "little") * 2 and block[21:] == b"\xff\xff\xff\xff"
    assert end[9:] == bytes(12)


@pytest.mark.parametrize("conf", [
    {"spark.sql.shuffle.partitions": "2", "spark.sql.streaming.stateStore.compression.codec": "zstd"},
    {"spark.sql.shuffle.partitions": "2", "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"},
])
def test_an_empty_state_for_another_store_or_codec_is_refused_by_name(conf):
    with pytest.raises(UnsupportedStateStore, match="^query vwap_out: cannot start a new stateful node"):
        empty_state_files(EmptyState("vwap_out", 1, 8), conf)
