"""Running a pipeline on Spark: the session, the queries, their progress."""
