"""Version 1 of the worker-controller protocol: the Python that ``make proto``
generates from ``proto/sparkpoint/v1/controller.proto`` (not committed).
Only the two edges import it: ``sparkpoint.wire`` converts its messages to
and from ``sparkpoint.messages``."""
