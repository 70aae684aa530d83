"""Pipeline files and checkpoint directories on disk, for ``sparkpoint plan``'s tests."""

from __future__ import annotations

import textwrap
from pathlib import Path

from worker.api.loader import load_pipeline
from worker.checkpointing.layout import Column, StateSchema
from worker.checkpointing.manifest import Manifest, QueryCut
from worker.checkpointing.store import CheckpointStore
from worker.stateplan.layout import pipeline_layout

SCHEMAS = {"vwap_state": StateSchema((Column("sym", "string"),), (Column("volume", "bigint", "sum(size)"),)),
           "counts": StateSchema((Column("sym", "string"),), (Column("n", "bigint", "count(1)"),))}


def write_pipeline(path: Path, aggregate: str = '"vwap_state"', extra: str = "") -> Path:
    path.write_text(textwrap.dedent(f"""\
        from worker import api as sp
        trades = sp.read.from_log("trades", schema="id long, sym string, size long", name="trades")
        sp.run(
            trades | sp.aggregate("sym", {{"volume": "sum(size)"}}, name={aggregate})
            | sp.write.to_files("vwap", name="vwap_out"),{extra}
        )
        """))
    return path


def take_checkpoint(directory: Path, pipeline_file: Path, checkpoint_id: int = 5, finished: tuple[str, ...] = ()):
    pipeline = load_pipeline(pipeline_file)
    layout = pipeline_layout(pipeline, SCHEMAS)
    store = CheckpointStore(directory)
    store.manifest_path(checkpoint_id).unlink(missing_ok=True)      # in place of any there (never overwritten)
    store.write_manifest(Manifest(
        checkpoint_id=checkpoint_id, worker_id="worker-0", created_at=1_700_000_000.0, duration_ms=3.0,
        bytes_copied=0, node_names=layout.node_names, pipeline_fingerprint=layout.fingerprint,
        queries=tuple(QueryCut(name, 41, {"0": 100}, {}, query) for name, query in layout.queries.items()),
        finished_nodes=finished))
    return store
