"""Mapping node names onto Spark's positional state: what a checkpoint holds
per query (``layout``), what a restore into a changed pipeline does with each
node (``plan``), where the checkpoint's files go (``remap``), and the few
Spark file formats that takes (``sparkfiles``). See docs/state-mapping.md."""
