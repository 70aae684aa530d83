"""Spark's own web UI for a worker: off unless ``SP_SPARK_UI_PORT`` asks for
it (it costs memory and a thread pool, and listens on every interface)."""

from __future__ import annotations


def spark_ui_conf(port: int | None) -> dict[str, str]:
    """The Spark configuration for the UI on ``port``, or with it off (None)."""
    if port is None:
        return {"spark.ui.enabled": "false"}
    # Spark binds the UI to every interface (unless SPARK_LOCAL_IP says
    # otherwise), so a container's published port reaches it. A taken port
    # makes Spark try the next ones: the worker logs where it landed.
    return {"spark.ui.enabled": "true", "spark.ui.port": str(port)}
