"""Replayable sources, on Spark's Python Data Source API."""
