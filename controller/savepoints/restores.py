"""Restoring a savepoint: whether the user must consent to output being
published again, and the requests waiting for each worker. Pure bookkeeping.

A restore asks every worker to start again from its part of a savepoint:
1. ``request`` records one request per worker index (replacing any earlier
   restore's).
2. A registered worker that has not registered with it since is told to
   restart (``needs_restart``); a worker not running yet gets it when it
   first registers (starting a pipeline from a savepoint).
3. Each registration is answered with the request (``deliver``) until the
   worker commits a checkpoint in the session that received it
   (``committed``). Until then its newest checkpoint is one taken *before*
   the restore, which is what the usual decision would pick after a crash:
   the worker restores the savepoint again instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from controller.savepoints.model import Savepoint, SavepointConflict
from sparkpoint.messages import RestoreDecision, SinkContract, SinkProgress


class RepublishRefused(SavepointConflict):
    """Restoring would publish output again and the user did not accept it."""


def republished_sinks(savepoint: Savepoint, sinks: Mapping[int, Sequence[SinkProgress]]) -> list[str]:
    """One line per transactional sink (it never publishes a batch twice,
    unless a restore goes back past its mark) that has published output the
    restore would publish again. ``sinks``: each worker index's sinks, as last reported.

    A savepoint of this deployment: the sinks that published past the
    worker's checkpoint in it. An imported one: its checkpoint ids are
    another deployment's and cannot be compared, and its state did not
    produce what was published here; any sink that has published at all."""
    lines = []
    for index, worker_sinks in sorted(sinks.items()):
        checkpoint = savepoint.checkpoints.get(index)
        for sink in worker_sinks:
            if sink.contract is not SinkContract.TRANSACTIONAL or checkpoint is None:
                continue
            if savepoint.imported_from and sink.published_checkpoint_id > 0:
                lines.append(f"sink {sink.name} on worker {index} has published up to checkpoint "
                             f"{sink.published_checkpoint_id} of this deployment")
            elif not savepoint.imported_from and sink.published_checkpoint_id > checkpoint:
                lines.append(f"sink {sink.name} on worker {index} has published up to checkpoint "
                             f"{sink.published_checkpoint_id}, past checkpoint {checkpoint} in the savepoint")
    return lines


def republish_refusal(savepoint: Savepoint, republished: Sequence[str]) -> RepublishRefused:
    origin = (f" (imported from {savepoint.imported_from}: its state comes from another deployment)"
              if savepoint.imported_from else "")
    return RepublishRefused(
        f"restoring savepoint {savepoint.savepoint_id}{origin} would publish output again: "
        f"{'; '.join(republished)}. To restore it anyway, pass --allow-republish (CLI) or "
        "allow_republish=true (REST)")


@dataclass(frozen=True)
class RestoreRequest:
    savepoint_id: str
    checkpoint_id: int          # the worker's checkpoint in the savepoint
    import_dir: str             # an imported savepoint: the worker's part, relative to the savepoint root
    allow_republish: bool
    requested_at: float
    session_id: str = ""        # the registration it was last handed to; "" until then

    def decision(self) -> RestoreDecision:
        return RestoreDecision(self.checkpoint_id, self.savepoint_id, self.import_dir, self.allow_republish)


class RestoreRequests:
    def __init__(self) -> None:
        self._pending: dict[int, RestoreRequest] = {}

    def request(self, requests: Mapping[int, RestoreRequest]) -> None:
        """A restore of every worker; an earlier restore still waiting is replaced."""
        self._pending = dict(requests)

    def needs_restart(self, worker_index: int) -> bool:
        request = self._pending.get(worker_index)
        return request is not None and not request.session_id

    def deliver(self, worker_index: int, session_id: str) -> RestoreRequest | None:
        """The request to answer this registration with, if any."""
        request = self._pending.get(worker_index)
        if request is not None:
            self._pending[worker_index] = replace(request, session_id=session_id)
        return request

    def committed(self, worker_index: int, session_id: str) -> None:
        """The worker committed a checkpoint: one of the restored run's ends the request."""
        request = self._pending.get(worker_index)
        if request is not None and request.session_id and request.session_id == session_id:
            del self._pending[worker_index]

    def pinned(self, worker_index: int) -> set[int]:
        """The checkpoint a waiting restore needs from the worker's own store."""
        request = self._pending.get(worker_index)
        return {request.checkpoint_id} if request is not None and not request.import_dir else set()
