"""The gRPC shared secret on the wire: ``authorization: Bearer <token>``
metadata on every call. ``with_token`` adds it to each call of a channel
(the worker's client); ``bearer_of`` reads it (the controller's interceptor)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from sparkpoint.secrets import Secret

METADATA_KEY = "authorization"


class _AddToken(grpc.UnaryUnaryClientInterceptor):
    def __init__(self, token: Secret) -> None:
        self._entry = (METADATA_KEY, f"Bearer {token.value}")

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        details = details._replace(metadata=[*(details.metadata or ()), self._entry])
        return continuation(details, request)


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
