#!/usr/bin/env bash
# Build one Sparkpoint image unless an identical one exists:
#
#   docker/build-image.sh NAME DOCKERFILE CONTEXT BASE_IMAGE INPUT...
#
# Tags sparkpoint-NAME:<hash> and sparkpoint-NAME:latest. The hash covers the
# Dockerfile, the base image's id and every INPUT (files or directories,
# relative to the repository; __pycache__ and *.pyc are ignored; a directory
# named build/wheelhouse is represented by its .stamp, the list of its
# wheels), so a second `make images` with nothing changed builds nothing.
# Extra `docker build` arguments may be passed in DOCKER_BUILD_ARGS.
set -euo pipefail

NAME=${1:?usage: $0 NAME DOCKERFILE CONTEXT BASE_IMAGE INPUT...}
DOCKERFILE=${2:?}
CONTEXT=${3:?}
BASE=${4:?}
shift 4
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
IMAGE_NAME="sparkpoint-$NAME"

base_id=$(docker image inspect -f '{{.Id}}' "$BASE" 2>/dev/null) || {
  echo "build-image: base image $BASE not found (make images builds it)" >&2; exit 1; }

hash_inputs() {
  echo "dockerfile $DOCKERFILE"; cat "$DOCKERFILE"
  echo "context $CONTEXT"; echo "base $base_id"
  [ -f .dockerignore ] && cat .dockerignore
  local input
  for input in "$@"; do
    if [ "$input" = build/wheelhouse ]; then
      echo "wheelhouse"; cat build/wheelhouse/.stamp build/wheelhouse/*requirements.txt
    elif [ -e "$input" ]; then
      find "$input" \( -name __pycache__ -prune \) -o -type f ! -name '*.pyc' -print0 \
        | LC_ALL=C sort -z | xargs -0 -r sha256sum
    else
      echo "missing $input"
    fi
  done
}
TAG=$(hash_inputs "$@" | sha256sum | cut -c1-12)
IMAGE="$IMAGE_NAME:$TAG"
mkdir -p build/images

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "image $IMAGE is up to date" >&2
else
  echo "building $IMAGE from $DOCKERFILE (base $BASE) ..." >&2
  start=$(date +%s)
  # shellcheck disable=SC2086
  docker build -f "$DOCKERFILE" --build-arg BASE_IMAGE="$BASE" ${DOCKER_BUILD_ARGS:-} \
    --label org.opencontainers.image.title="$IMAGE_NAME" --label sparkpoint.inputs="$TAG" \
    -t "$IMAGE" "$CONTEXT" >&2
  echo "built $IMAGE in $(( $(date +%s) - start ))s" >&2
fi
docker tag "$IMAGE" "$IMAGE_NAME:latest"
echo "$IMAGE" > "build/images/$NAME.ref"
echo "$IMAGE"
