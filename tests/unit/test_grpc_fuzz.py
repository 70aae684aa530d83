"""Every RPC fuzzed with hypothesis-generated messages against an
in-process gRPC server: whatever arrives, the answer is a result or a
refusal (INVALID_ARGUMENT, FAILED_PRECONDITION, NOT_FOUND), never INTERNAL
or UNKNOWN; the refusal's message stays short; and nothing accepted breaks
the controller's status or its checkpoint (both JSON, no NaN).

Messages are drawn from each message type's descriptor: every field, any
value of its wire type (unknown enum numbers, NaN, huge and negative
numbers, long and odd strings), mixed with values that get past the first
checks (the registered workers' ids and sessions), so deeper code runs too."""

from __future__ import annotations

import json
import math

import grpc
import pytest
from fastapi.testclient import TestClient
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.grpc.servicer import DETAILS_MAX, start_grpc_server
from controller.rest.app import create_app
from sparkpoint.v1 import controller_pb2 as pb
from sparkpoint.v1 import controller_pb2_grpc as pb_grpc
from tests.unit.fakes import FakeClock, new_service
from tests.unit.savepoint_support import running_pipeline, take

REFUSALS = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND}
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
    server, port = start_grpc_server(service, "127.0.0.1", 0)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    with TestClient(create_app(service)) as rest:
        yield service, pb_grpc.ControllerStub(channel), rest
    channel.close()
    server.stop(grace=None).wait()


def answered(call, request) -> None:
    try:
        call(request, timeout=10)
    except grpc.RpcError as error:
        assert error.code() in REFUSALS, f"{error.code().name}: {error.details()}"
        assert len(error.details()) <= DETAILS_MAX


def still_whole(service, rest) -> None:
    assert rest.get("/status").status_code == 200
    json.dumps(service.snapshot(), allow_nan=False)


REQUESTS = {
    "Register": messages(pb.RegisterRequest.DESCRIPTOR),
    "ReportProgress": from_a_registered_worker(pb.ProgressReport.DESCRIPTOR),
    "CommitCheckpoint": from_a_registered_worker(pb.CheckpointCommit.DESCRIPTOR),
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
