"""Sparkpoint's shared base: what both services (``controller``, ``worker``)
and the CLI (``sparkpoint_cli``) use, depending on none of them.

File I/O that survives crashes (``fileio``), path confinement (``paths``),
backoff, table rendering, fault sentinels, settings from the environment
(``settings``), the event log format (``eventlog``), and the worker-controller
protocol: its messages (``messages``), the generated gRPC code (``v1``) and
the conversion between the two (``wire``). Spark's Python processes import
parts of it, so nothing here imports more than it needs.
"""
