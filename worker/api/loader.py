"""Load a pipeline definition file: run it and collect what it passes to ``sp.run``."""

from __future__ import annotations

import runpy
import traceback
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from worker.api.graph import Pipeline

_collected: ContextVar[list[Pipeline] | None] = ContextVar("sparkpoint_pipelines", default=None)


def record_pipeline(pipeline: Pipeline) -> None:
    collected = _collected.get()
    if collected is not None:
        collected.append(pipeline)


def load_pipeline(path: Path) -> Pipeline:
    """The pipeline the file at ``path`` declares; errors name the file."""
    from worker.api.graph import PipelineError

    path = Path(path)
    if not path.is_file():
        raise PipelineError(f"{path}: pipeline file does not exist")
    collected: list[Pipeline] = []
    token = _collected.set(collected)
    try:
        runpy.run_path(str(path), run_name="__sparkpoint_pipeline__")
    except PipelineError as error:
        raise PipelineError(f"{path}: {error}") from None
    except Exception as error:  # user code: report where, not a stack trace
        frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == str(path)]
        where = f" (line {frames[-1].lineno})" if frames else ""
        raise PipelineError(f"{path}{where}: {type(error).__name__}: {error}") from None
    finally:
        _collected.reset(token)
    if not collected:
        raise PipelineError(f"{path}: does not define a pipeline: call sp.run(...) with the streams to run")
    if len(collected) > 1:
        raise PipelineError(f"{path}: calls sp.run() {len(collected)} times; pass every stream to one call")
    return collected[0]
