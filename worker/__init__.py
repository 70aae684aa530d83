"""Sparkpoint worker: runs a pipeline's Spark Structured Streaming queries."""
