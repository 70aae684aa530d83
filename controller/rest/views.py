"""The JSON the status page and the CLI read beyond ``/status``: the
pipeline graph, the recent history, a worker's checkpoints."""

from __future__ import annotations

from fastapi import APIRouter, Query

from controller.core.checkpoints import DurableCheckpoint
from controller.core.graph import PipelineView
from controller.core.history import HistoryView
from controller.core.service import ControllerService
from controller.rest.models import WorkerId, answers


def views_router(service: ControllerService) -> APIRouter:
    router = APIRouter()

    @router.get("/pipeline", response_model=PipelineView,
                summary="The pipeline graph: every node, which keep state, which have finished")
    def pipeline() -> PipelineView:
        return service.pipeline()

    @router.get("/history", response_model=HistoryView, responses=answers(400),
                summary="Each worker's rows/s, lag and checkpoint durations over the last minutes")
    def history(since: float = Query(0.0, ge=0, allow_inf_nan=False,
                                     description="only samples after this time (the controller's clock, seconds "
                                                 "since the epoch; a previous answer's now)")
                ) -> HistoryView:
        return service.history(since)

    @router.get("/workers/{worker_id}/checkpoints", response_model=list[DurableCheckpoint],
                responses=answers(400, 404),
                summary="The worker's durable checkpoints, oldest first, as it last reported them")
    def checkpoints(worker_id: WorkerId) -> list[DurableCheckpoint]:
        return service.checkpoints(worker_id)

    return router
