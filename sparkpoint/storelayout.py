"""The on-disk layout of a checkpoint store, which the worker writes and the
controller checks in exported savepoints::

    blobs/ab/abcdef...              file contents, named by SHA-256
    manifests/000000000042.json     one checkpoint's manifest
"""

from __future__ import annotations

BLOBS = "blobs"
MANIFESTS = "manifests"


def manifest_name(checkpoint_id: int) -> str:
    """A manifest's path relative to its store."""
    return f"{MANIFESTS}/{checkpoint_id:012d}.json"
