#!/usr/bin/env bash
# Build one Sparkpoint image unless an identical one exists:
#
#   docker/build-image.sh NAME DOCKERFILE CONTEXT BASE_IMAGE INPUT...
#
# Tags sparkpoint-NAME:<hash> and sparkpoint-NAME:latest. The hash covers the
# Dockerfile, the base image's id and every INPUT (files or directories,
# relative to the repository; __pycache__, *.pyc, *.jsa and *.jar are ignored; a directory
# named build/wheelhouse is represented by its .stamp, the list of its
# wheels), so a second `make images` with nothing changed builds nothing.
# Older sparkpoint-NAME:<hash> tags are removed after a build.
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
  [ -f "$CONTEXT/.dockerignore" ] && cat "$CONTEXT/.dockerignore"
  local input
  for input in "$@"; do
    if [ "$input" = build/wheelhouse ]; then
      echo "wheelhouse"; cat build/wheelhouse/.stamp build/wheelhouse/*requirements.txt
    elif [ -e "$input" ]; then
      # *.jsa: the host's class archive, which .dockerignore keeps out of the context.
      # *.jar: the worker's JVM classes, which `make jars` builds anew in every
      # clone (its entries carry their build time: no two builds hash alike);
      # the worker image hashes their sources, jvm/, instead.
      find "$input" \( -name __pycache__ -prune \) -o -type f ! -name '*.pyc' ! -name '*.jsa' ! -name '*.jar' -print0 \
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
  log="build/images/$NAME.log"
  : > "$log"
  # A multi-stage Dockerfile's `build` stage is tagged too (sparkpoint-NAME-build):
  # it holds the layer cache of the dependency install, and an untagged stage
  # would linger as a dangling image after every build.
  targets=()
  grep -qiE '^FROM .* AS build$' "$DOCKERFILE" && targets+=("--target build -t $IMAGE_NAME-build:$TAG")
  targets+=("-t $IMAGE")
  ok=1
  for target in "${targets[@]}"; do
    # shellcheck disable=SC2086
    docker build -f "$DOCKERFILE" --build-arg BASE_IMAGE="$BASE" ${DOCKER_BUILD_ARGS:-} \
      $target "$CONTEXT" >> "$log" 2>&1 || { ok=0; break; }
  done
  if [ "$ok" = 0 ]; then
    echo "build-image: docker build of $IMAGE failed; last lines of $log:" >&2
    tail -n 40 "$log" >&2
    exit 1
  fi
  echo "built $IMAGE in $(( $(date +%s) - start ))s (log: $log)" >&2
fi
docker tag "$IMAGE" "$IMAGE_NAME:latest"
# Older builds of this image and of its build stage: untag them (their layers
# go unless still used).
{ docker images --format '{{.Repository}}:{{.Tag}}' "$IMAGE_NAME"
  docker images --format '{{.Repository}}:{{.Tag}}' "$IMAGE_NAME-build"; } \
  | grep -v -x -e "$IMAGE" -e "$IMAGE_NAME:latest" -e "$IMAGE_NAME-build:$TAG" \
  | xargs -r docker rmi >/dev/null 2>&1 || true
echo "$IMAGE" > "build/images/$NAME.ref"
echo "$IMAGE"
