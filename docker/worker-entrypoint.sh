#!/bin/sh
# Entrypoint of the worker image: runs its command ("python -m worker").
#
# SP_WORK_DIR is container-local and survives a restart of the same container
# by its restart policy; a health file left by the killed run would make the
# new run look healthy before it has even registered with the controller.
# Remove it first: the worker writes a fresh one with its first report.
rm -f "${SP_WORK_DIR:-/tmp/sparkpoint/work}/health.json"
exec "$@"
