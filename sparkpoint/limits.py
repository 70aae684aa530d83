"""What the worker-controller protocol accepts: bounds both services know.

The controller checks every message against them before it records
anything (``controller.core.validation``) and refuses one outside them with
``INVALID_ARGUMENT`` and a short message. Free text (errors, sink targets)
is clipped, not refused: a worker must stay visible whatever its errors say.
"""

from __future__ import annotations

import re

# A worker id, a query's, a sink's or a node's name (and a node's kind):
# each names files and directories, so nothing a shell or a path would read
# as syntax. (Node names are stricter still: worker.api.graph.NAME_PATTERN.)
NAME_MAX = 64
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
NAME_RULE = "letters, digits, '_', '.', '-', starting with a letter or digit, at most 64 characters"
# Opaque tokens: session ids, pipeline fingerprints, savepoint ids in answers.
TOKEN_MAX = 128
# A source partition, as offsets name it: a log's partition, or a Kafka
# topic's (``<topic>:<partition>``, sparkpoint.offsets; Kafka's topic names).
PARTITION = re.compile(r"[0-9]{1,9}|[A-Za-z0-9._-]{1,249}:[0-9]{1,9}")
# Paths relative to the savepoint root (export answers); Linux's PATH_MAX.
PATH_MAX = 4096
# Free text, clipped to this many characters.
TEXT_MAX = 1000

# Checkpoint ids: 1, 2, ... per worker. Manifests are named with 12 digits
# (sparkpoint.storelayout), so ids stay below 10^12 -- at one checkpoint a
# millisecond, 31 years -- and a worker counting past the highest id the
# controller accepted still fits the protocol's int64.
CHECKPOINT_ID_MAX = 10**12 - 1
# How far past the newest checkpoint the controller knows of a worker a
# commit (or a registration's checkpoints) may go. A worker takes one id per
# checkpoint, so a jump this large means a million checkpoints the controller
# never saw (58 days at the default SP_CHECKPOINT_FREQ of 5 s); beyond it an
# id is not believed.
CHECKPOINT_ID_STEP_MAX = 1_000_000

# How many of each a message may hold.
MAX_QUERIES = 256           # queries in a report or a checkpoint; sinks in a report
MAX_PARTITIONS = 4096       # offsets per query, and latest offsets
MAX_NODES = 1024            # a registration's node names and graph nodes, a node's inputs, a report's finished nodes
MAX_CHECKPOINTS = 10_000    # checkpoints a registration or a report lists
MAX_ANSWERS = 256           # savepoint answers and export answers in a report
