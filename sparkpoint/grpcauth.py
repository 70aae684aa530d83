"""gRPC's credentials on the client's side and on the wire.

The shared secret: ``authorization: Bearer <token>`` metadata on every call.
``with_token`` adds it to each call of a channel (the worker's client);
``bearer_of`` reads it (the controller's interceptor). Mutual TLS:
``open_channel`` presents this side's certificate and checks the
controller's against the CA. ``failure``: why a call failed, in one line
(a TLS handshake that failed says so, not just ``UNAVAILABLE``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from sparkpoint.errors import clip
from sparkpoint.secrets import Secret, TlsFiles

METADATA_KEY = "authorization"


class _AddToken(grpc.UnaryUnaryClientInterceptor):
    def __init__(self, token: Secret) -> None:
        self._entry = (METADATA_KEY, f"Bearer {token.value}")

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        details = details._replace(metadata=[*(details.metadata or ()), self._entry])
        return continuation(details, request)


def open_channel(address: str, tls: TlsFiles | None) -> grpc.Channel:
    """A channel to ``address``: mutual TLS with ``tls``, else plain text."""
    if tls is None:
        return grpc.insecure_channel(address)
    certificate, key, ca = tls.read()
    return grpc.secure_channel(address, grpc.ssl_channel_credentials(
        root_certificates=ca, private_key=key, certificate_chain=certificate))


def with_token(channel: grpc.Channel, token: Secret | None) -> grpc.Channel:
    """``channel`` whose every call carries ``token`` (unchanged without one)."""
    return grpc.intercept_channel(channel, _AddToken(token)) if token is not None else channel


def bearer_of(metadata: Any) -> str | None:
    """The token an ``authorization: Bearer`` entry carries; None without one."""
    for key, value in metadata or ():
        if key == METADATA_KEY and isinstance(value, str):
            scheme, _, token = value.partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


def failure(error: grpc.RpcError) -> str:
    """A failed call in one line: its status and what gRPC says of it,
    clipped (a refused connection, a TLS handshake that failed and why)."""
    details = " ".join((error.details() or "").split())
    return f"{error.code().name}: {clip(details, 300)}" if details else error.code().name
