"""The pipeline-wide progress table: one record per worker (pure bookkeeping)."""
