"""Spark's own web UI for a worker: off unless ``SP_SPARK_UI_PORT`` asks for
it (it costs memory and a thread pool, and listens on every interface)."""

from __future__ import annotations

# With the UI off, nothing reads what Spark's status listeners keep of past
# jobs, stages and SQL executions, yet they keep it: a thousand of each by
# default, a streaming query's few every batch, so that it lives long enough
# to reach the old generation before it is dropped; and each execution's
# plan described in the UI's detailed ("formatted") form. Without the UI they
# keep a few, and the plan's plain tree.
_UNSEEN_HISTORY = {
    "spark.ui.retainedJobs": "10",
    "spark.ui.retainedStages": "10",
    "spark.ui.retainedDeadExecutors": "10",
    "spark.ui.dagGraph.retainedRootRDDs": "10",
    "spark.sql.ui.retainedExecutions": "10",
    "spark.sql.ui.explainMode": "simple",
}


def spark_ui_conf(port: int | None) -> dict[str, str]:
    """The Spark configuration for the UI on ``port``, or with it off (None)."""
    if port is None:
        return {"spark.ui.enabled": "false", **_UNSEEN_HISTORY}
    # Spark binds the UI to every interface (unless SPARK_LOCAL_IP says
    # otherwise), so a container's published port reaches it. A taken port
    # makes Spark try the next ones: the worker logs where it landed.
    return {"spark.ui.enabled": "true", "spark.ui.port": str(port)}
