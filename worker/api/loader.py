"""Load a pipeline definition file: run it and collect what it passes to ``sp.run``."""

from __future__ import annotations

import runpy
import sys
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


def _pickle_by_value(directory: str, module_names: set[str]) -> None:
    from pyspark import cloudpickle

    for name in module_names:
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None)
        if file and Path(file).resolve().is_relative_to(directory):
            cloudpickle.register_pickle_by_value(module)


def load_pipeline(path: Path) -> Pipeline:
    """The pipeline the file at ``path`` declares; errors name the file.

    The file may import modules beside it (shared schemas and functions): its
    directory is on ``sys.path`` while it runs, and the modules it imports from
    there are pickled by value, so Spark's Python workers, which do not have
    that directory on their path, can run functions from them.
    """
    from worker.api.graph import PipelineError

    path = Path(path)
    if not path.is_file():
        raise PipelineError(f"{path}: pipeline file does not exist")
    collected: list[Pipeline] = []
    token = _collected.set(collected)
    directory = str(path.resolve().parent)
    imported_before = set(sys.modules)
    sys.path.insert(0, directory)
    try:
        runpy.run_path(str(path), run_name="__sparkpoint_pipeline__")
        _pickle_by_value(directory, set(sys.modules) - imported_before)
    except PipelineError as error:
        raise PipelineError(f"{path}: {error}") from None
    except Exception as error:  # user code: report where, not a stack trace
        frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == str(path)]
        where = f" (line {frames[-1].lineno})" if frames else ""
        raise PipelineError(f"{path}{where}: {type(error).__name__}: {error}") from None
    finally:
        _collected.reset(token)
        sys.path.remove(directory)
    if not collected:
        raise PipelineError(f"{path}: does not define a pipeline: call sp.run(...) with the streams to run")
    if len(collected) > 1:
        raise PipelineError(f"{path}: calls sp.run() {len(collected)} times; pass every stream to one call")
    return collected[0]
