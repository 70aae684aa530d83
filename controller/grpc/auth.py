"""Who may call the controller over gRPC.

- The shared secret, checked by a server interceptor before any handler
  runs: a call without ``authorization: Bearer <token>`` metadata matching
  ``SP_GRPC_TOKEN_FILE``'s (constant-time) ends ``UNAUTHENTICATED``.
- Mutual TLS (``server_credentials``): a client without a certificate the
  CA signed does not get past the handshake; ``peer_name`` is the common
  name of the one it presented, the worker id it may act for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from sparkpoint.grpcauth import bearer_of
from sparkpoint.secrets import Secret, TlsFiles


def _refuse(message: str) -> grpc.RpcMethodHandler:
    def abort(_: Any, context: grpc.ServicerContext) -> None:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    return grpc.unary_unary_rpc_method_handler(abort)


class TokenInterceptor(grpc.ServerInterceptor):
    def __init__(self, token: Secret) -> None:
        self._token = token
        self._missing = _refuse("a token is required: send authorization: Bearer <SP_GRPC_TOKEN_FILE's token>")
        self._wrong = _refuse("wrong token: send authorization: Bearer <SP_GRPC_TOKEN_FILE's token>")

    def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler],
                          details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        given = bearer_of(details.invocation_metadata)
        if given is None:
            return self._missing
        if not self._token.matches(given):
            return self._wrong
        return continuation(details)


def server_credentials(tls: TlsFiles) -> grpc.ServerCredentials:
    """This server's certificate; clients must present one the CA signed."""
    certificate, key, ca = tls.read()
    return grpc.ssl_server_credentials([(key, certificate)], root_certificates=ca, require_client_auth=True)


def peer_name(context: grpc.ServicerContext) -> str | None:
    """The common name of the client's certificate; None without one."""
    names = context.auth_context().get("x509_common_name")
    return names[0].decode(errors="replace") if names else None
