"""Errors the core raises; each transport maps them to its status codes in one place."""


class ControllerError(Exception):
    """Base: the message is safe to show to users."""


class InvalidRequest(ControllerError):
    """The request itself is malformed (gRPC INVALID_ARGUMENT, HTTP 400)."""


class NotFound(ControllerError):
    """The named thing does not exist (gRPC NOT_FOUND, HTTP 404)."""


class Conflict(ControllerError):
    """The request contradicts the controller's state (gRPC FAILED_PRECONDITION, HTTP 409)."""


class SessionActive(Conflict):
    """Another live session holds the worker id (gRPC ALREADY_EXISTS, HTTP 409):
    retry once it has been silent long enough."""


class Superseded(Conflict):
    """A later holder of the worker's checkpoint volume has registered since:
    this process was taken over and must stop (gRPC FAILED_PRECONDITION)."""


class Unavailable(ControllerError):
    """The controller cannot do it now: its state cannot be written, so the
    change was not made (gRPC UNAVAILABLE, HTTP 503)."""
