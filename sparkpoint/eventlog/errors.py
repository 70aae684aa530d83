"""The one error the event log raises."""


class LogFormatError(ValueError):
    """The log directory is missing or malformed; the message names the path."""
