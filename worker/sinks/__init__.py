"""Sinks, on Spark's Python Data Source API (``DataSourceStreamArrowWriter``)."""
