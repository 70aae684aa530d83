"""One run of the worker's pipeline inside a living Spark session: register,
restore, recover staging, start the queries, then checkpoint, publish,
report and supervise until the run ends (``serve.py`` lists the steps)."""
