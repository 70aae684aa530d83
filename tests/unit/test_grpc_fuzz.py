"""Every RPC fuzzed with hypothesis-generated messages against an
in-process gRPC server: whatever arrives, the answer is a result or a
refusal (INVALID_ARGUMENT, FAILED_PRECONDITION, NOT_FOUND), never INTERNAL
or UNKNOWN; the refusal's message stays short; and nothing accepted breaks
the controller's status or its checkpoint (both JSON, no NaN).

Messages are drawn from each message type's descriptor: every field, any
value of its wire type (unknown enum numbers, NaN, huge and negative
numbers, long and odd strings), mixed with values that get past the first
checks (the registered workers' ids and sessions), so deeper code runs too:
the operator's fields as well (the graph at registration, latest offsets,
durable checkpoint lists, recovery times, sink retries), after which
``/status``, ``/pipeline``, ``/history``, ``/metrics`` and each worker's
checkpoints still answer."""

from __future__ import annotations

import json
import math

import grpc
import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.grpc.servicer import DETAILS_MAX, start_grpc_server
from sparkpoint.grpcauth import with_token
from sparkpoint.messages import Registration
from sparkpoint.v1 import controller_pb2 as pb
from sparkpoint.v1 import controller_pb2_grpc as pb_grpc
from tests.unit.fakes import FakeClock, new_service
from tests.unit.grpc_support import GRPC_TOKEN
from tests.unit.rest_support import client_for
from tests.unit.savepoint_support import running_pipeline, take

# ALREADY_EXISTS: a registration under a worker id whose session is alive, not naming it.
REFUSALS = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND,
            grpc.StatusCode.ALREADY_EXISTS}
# What gets a message past the first checks: the pipeline's workers and sessions (s1, s2).
KNOWN = ["w0", "w1", "s1", "s2", "sp-000001", "0", "1", "fp-1", "out"]

_INTEGERS = {
    FieldDescriptor.TYPE_INT32: (-2**31, 2**31 - 1), FieldDescriptor.TYPE_INT64: (-2**63, 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1), FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_ENUM: (-2**31, 2**31 - 1),
}


def integers(low: int, high: int) -> st.SearchStrategy[int]:
    edges = [v for v in (0, 1, -1, 2, 10**12 - 1, 10**12, 2**31 - 1, 2**63 - 1, low, high) if low <= v <= high]
    return st.sampled_from(edges) | st.integers(low, high)


def text() -> st.SearchStrategy[str]:
    """Strings protobuf can carry (UTF-8: no lone surrogates), short and very long."""
    chars = st.characters(exclude_categories=("Cs",))
    return st.sampled_from(KNOWN) | st.text(chars, max_size=20) | st.builds(lambda c, n: c * n, chars,
                                                                             st.integers(60, 5000))


def field_values(field: FieldDescriptor, depth: int) -> st.SearchStrategy:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return messages(field.message_type, depth + 1)
    if field.type in _INTEGERS:
        low, high = _INTEGERS[field.type]
        return integers(low, high)
    if field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        edges = st.sampled_from([math.nan, math.inf, -math.inf, -1.0, 0.0, 1e300])
        return edges | st.floats(width=32 if field.type == FieldDescriptor.TYPE_FLOAT else 64)
    if field.type == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if field.type == FieldDescriptor.TYPE_STRING:
        return text()
    raise AssertionError(f"no strategy for {field.full_name}")


@st.composite
def _message(draw, descriptor: Descriptor, depth: int):
    message_class = getattr(pb, descriptor.name)
    values = {}
    oneofs_set = set()
    for field in descriptor.fields:
        if field.containing_oneof is not None:
            if field.containing_oneof.name in oneofs_set or not draw(st.booleans()):
                continue
            oneofs_set.add(field.containing_oneof.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
            values[field.name] = draw(st.dictionaries(field_values(key, depth), field_values(value, depth),
                                                      max_size=3))
        elif field.is_repeated:
            values[field.name] = draw(st.lists(field_values(field, depth), max_size=3 if depth < 2 else 0))
        elif field.type == FieldDescriptor.TYPE_MESSAGE and depth >= 3:
            continue
        elif draw(st.booleans()) or field.name in ("worker_id", "session_id"):
            values[field.name] = draw(field_values(field, depth))
    return message_class(**values)


def messages(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy:
    return _message(descriptor, depth)


@st.composite
def from_a_registered_worker(draw, descriptor: Descriptor):
    """Mostly a worker's current session (so the message is read past its
    identity), sometimes anyone's."""
    message = draw(messages(descriptor))
    if draw(st.integers(0, 9)) < 7:
        message.worker_id, message.session_id = draw(st.sampled_from([("w0", "s1"), ("w1", "s2")]))
    return message


@pytest.fixture
def controller(tmp_path):
    """A controller with two workers (sessions s1, s2) and a savepoint, served in process."""
    service = new_service(FakeClock(), tmp_path)
    take(running_pipeline(service))
    server, port = start_grpc_server(service, "127.0.0.1", 0, token=GRPC_TOKEN)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    with client_for(service) as rest:
        yield service, pb_grpc.ControllerStub(with_token(channel, GRPC_TOKEN)), rest
    channel.close()
    server.stop(grace=None).wait()


def answered(call, request) -> None:
    try:
        call(request, timeout=10)
    except grpc.RpcError as error:
        assert error.code() in REFUSALS, f"{error.code().name}: {error.details()}"
        assert len(error.details()) <= DETAILS_MAX


# What shows what workers sent: /status and the operator's views.
VIEWS = ("/status", "/pipeline", "/history", "/metrics", "/workers/w0/checkpoints", "/workers/w1/checkpoints")


def still_whole(service, rest) -> None:
    for view in VIEWS:
        assert rest.get(view).status_code == 200, view
    json.dumps(service.snapshot(), allow_nan=False)


REQUESTS = {
    "Register": messages(pb.RegisterRequest.DESCRIPTOR),
    "ReportProgress": from_a_registered_worker(pb.ProgressReport.DESCRIPTOR),
    "CommitCheckpoint": from_a_registered_worker(pb.CheckpointCommit.DESCRIPTOR),
    "StandBy": messages(pb.StandbyReport.DESCRIPTOR),
}


def test_every_rpc_is_fuzzed():
    assert set(pb.DESCRIPTOR.services_by_name["Controller"].methods_by_name) == set(REQUESTS)


@pytest.mark.parametrize("rpc", sorted(REQUESTS))
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_no_message_makes_an_rpc_fail_inside(controller, rpc, data):
    service, stub, rest = controller
    answered(getattr(stub, rpc), data.draw(REQUESTS[rpc], label="request"))
    still_whole(service, rest)


# --- one field at a time ---------------------------------------------------------------------
# A message of random fields is refused for its first bad one, so deep fields
# are seldom read. Here a message the controller accepts, with every field of
# every message in it set, has one field replaced by any value of its type.

def _checkpoint(checkpoint_id: int) -> pb.CheckpointRef:
    return pb.CheckpointRef(checkpoint_id=checkpoint_id, size_bytes=2048, duration_ms=12.5, created_at=1000.0,
                            bytes_copied=512, queries=[pb.QueryCut(name="out", batch_id=3, offsets={"0": 120})])


ACCEPTED = {
    "Register": pb.RegisterRequest(
        worker_id="w0", worker_index=0, worker_count=2, pipeline_fingerprint="fp-1", node_names=["src", "out"],
        checkpoints=[_checkpoint(5)],
        nodes=[pb.PipelineNode(name="src", kind="source.log"),
               pb.PipelineNode(name="out", kind="sink.files", stateful=True, inputs=["src"])],
        session_id="s1", host="c0ffee", pid=7),
    "ReportProgress": pb.ProgressReport(
        worker_id="w0", session_id="s1", seq=1, state=pb.WORKER_STATE_RUNNING,
        queries=[pb.QueryProgress(name="out", batch_id=4, offsets={"0": 120}, rows_processed=10,
                                  rows_per_second=2.5, active=True, error="", latest_offsets={"0": 300})],
        dropped_checkpoints=1, restored_checkpoint_id=4,
        recovery=pb.Recovery(active=False, target_bytes=300, replayed_bytes=300, started_at=990.0,
                             duration_ms=1500.0),
        sinks=[pb.SinkProgress(name="out", target="files out", contract=pb.SINK_CONTRACT_TRANSACTIONAL,
                               state=pb.SINK_STATE_WAITING, error="disk full", waiting_since=995.0,
                               next_retry_at=1001.0, published_checkpoint_id=4, published_batch_id=3,
                               pending_batches=1, retries=2)],
        savepoint_answers=[pb.SavepointAnswer(savepoint_id="sp-000001", checkpoint_id=5)],
        exports=[pb.ExportAnswer(savepoint_id="sp-000001", dir="exports/one/worker-0", error="")],
        failed_checkpoints=1, checkpoint_error="checkpoint 6: OSError", finished_nodes=["src"],
        checkpoints=pb.CheckpointList(checkpoints=[_checkpoint(5), _checkpoint(6)]),
        checkpoint_volume=pb.VolumeUse(used_bytes=1 << 30, free_bytes=1 << 20)),
    "CommitCheckpoint": pb.CheckpointCommit(worker_id="w0", session_id="s1", checkpoint=_checkpoint(6)),
    "StandBy": pb.StandbyReport(worker_id="w0", host="c0ffee", pid=7, state=pb.STANDBY_STATE_READY,
                                started_at=990.0),
}


def leaves(message, path: tuple = ()) -> list[tuple]:
    """Every settable field of ``message`` as a path (names; a repeated
    message's items by index): scalars, repeated scalars and maps whole."""
    found = []
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.type != FieldDescriptor.TYPE_MESSAGE or field.message_type.GetOptions().map_entry:
            found.append((*path, field.name))
        elif field.is_repeated:
            for i, item in enumerate(value):
                found += leaves(item, (*path, field.name, i))
        else:
            found += leaves(value, (*path, field.name))
    return found


def replaced(message, path: tuple, data: st.DataObject):
    """A copy of ``message`` with the field at ``path`` drawn afresh."""
    copy = type(message)()
    copy.CopyFrom(message)
    parent = copy
    for step in path[:-1]:
        parent = parent[step] if isinstance(step, int) else getattr(parent, step)
    field = parent.DESCRIPTOR.fields_by_name[path[-1]]
    if field.message_type is not None:       # a map
        key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
        drawn = data.draw(st.dictionaries(field_values(key, 0), field_values(value, 0), max_size=3), label="map")
        getattr(parent, field.name).clear()
        getattr(parent, field.name).update(drawn)
    elif field.is_repeated:
        drawn = data.draw(st.lists(field_values(field, 0), max_size=3), label="items")
        del getattr(parent, field.name)[:]
        getattr(parent, field.name).extend(drawn)
    else:
        setattr(parent, field.name, data.draw(field_values(field, 0), label="value"))
    return copy


def fields_within(descriptor: Descriptor) -> set[str]:
    """Every field of the message type and of the message types in it but
    the messages themselves (scalars, repeated scalars, maps)."""
    names = set()
    for field in descriptor.fields:
        if field.message_type is not None and not field.message_type.GetOptions().map_entry:
            names |= fields_within(field.message_type)
        else:
            names.add(field.full_name)
    return names


def current(message, service):
    """``message`` from w0 registered afresh (what accepted one message would
    find a duplicate the next time): its session's first report, a commit one
    past its newest checkpoint; a registration continuing w0's live session."""
    if message.DESCRIPTOR.name == "RegisterRequest":
        message.session_id = service.worker("w0").session_id
    if message.DESCRIPTOR.name in ("ProgressReport", "CheckpointCommit"):
        session = service.register(Registration("w0", 0, 2, "fp-1", ("src", "out"),
                                                session_id=service.worker("w0").session_id)).session_id
        message.session_id = session
        if message.DESCRIPTOR.name == "ProgressReport":
            message.seq = 1
        else:
            message.checkpoint.checkpoint_id = service.worker("w0").last_checkpoint_id + 1
    return message


@pytest.mark.parametrize("rpc", sorted(ACCEPTED))
def test_each_accepted_message_reaches_every_field_and_is_accepted(controller, rpc):
    """So the test below fuzzes every field: the operator's (the graph, latest
    offsets, durable checkpoints, recovery times, retries) and any added later."""
    message = ACCEPTED[rpc]
    covered = set()
    for path in leaves(message):
        parent = message
        for step in path[:-1]:
            parent = parent[step] if isinstance(step, int) else getattr(parent, step)
        covered.add(parent.DESCRIPTOR.fields_by_name[path[-1]].full_name)
    assert fields_within(message.DESCRIPTOR) - covered == set()
    service, stub, _ = controller
    reply = getattr(stub, rpc)(current(message, service), timeout=10)
    assert getattr(reply, "status", pb.REPORT_STATUS_ACCEPTED) == pb.REPORT_STATUS_ACCEPTED


@pytest.mark.parametrize("rpc", sorted(ACCEPTED))
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_no_single_field_makes_an_accepted_message_fail_inside(controller, rpc, data):
    service, stub, rest = controller
    path = data.draw(st.sampled_from(leaves(ACCEPTED[rpc])), label="field")
    base = type(ACCEPTED[rpc])()
    base.CopyFrom(ACCEPTED[rpc])
    answered(getattr(stub, rpc), replaced(current(base, service), path, data))
    still_whole(service, rest)
