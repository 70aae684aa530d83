#!/usr/bin/env bash
# Build one of Sparkpoint's base images without a container registry:
#
#   docker/build-rootfs.sh NAME        (NAME: python | java | postgres)
#
# A minimal Debian root filesystem (debootstrap --variant=minbase) with the
# packages listed in docker/base/NAME.packages, imported with `docker import`
# as sparkpoint-base-NAME:<tag> (and :latest). The tag is a hash of the
# package list, the suite and this script, so a rebuild is skipped when none of
# them changed. The mirror is read from this machine's apt configuration
# (docker/apt-mirror.py); it is never written into the repository.
#
# SP_BASE_SOURCE=registry builds the same package list on top of a public
# image instead (SP_BASE_FROM, default debian:bookworm-slim), for machines that
# can pull; the tag is the same, so everything downstream is unchanged.
#
# Prints the image reference on its last line of output and writes it to
# build/base-NAME.ref.
set -euo pipefail

NAME=${1:?usage: $0 python|java|postgres}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
SUITE=${SP_DEBIAN_SUITE:-bookworm}
PACKAGE_FILE="$HERE/base/$NAME.packages"
BUILD="$REPO/build"
IMAGE_NAME="sparkpoint-base-$NAME"
SOURCE=${SP_BASE_SOURCE:-debootstrap}

[ -f "$PACKAGE_FILE" ] || { echo "build-rootfs: no package list $PACKAGE_FILE" >&2; exit 2; }
PACKAGES=$(grep -v '^[[:space:]]*#' "$PACKAGE_FILE" | tr -s ' \t\n' '\n' | grep -v '^$' | sort -u | paste -sd, -)

TAG=$( { echo "suite=$SUITE"; echo "packages=$PACKAGES"; cat "$0"; } | sha256sum | cut -c1-12)
IMAGE="$IMAGE_NAME:$TAG"
mkdir -p "$BUILD"

finish() {
  docker tag "$IMAGE" "$IMAGE_NAME:latest"
  docker images --format '{{.Repository}}:{{.Tag}}' "$IMAGE_NAME" \
    | grep -v -x -e "$IMAGE" -e "$IMAGE_NAME:latest" | xargs -r docker rmi >/dev/null 2>&1 || true
  echo "$IMAGE" > "$BUILD/base-$NAME.ref"
  echo "$IMAGE"
}

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "base image $IMAGE is up to date" >&2
  finish
  exit 0
fi

# ---------------------------------------------------------------------------
if [ "$SOURCE" = registry ]; then
  FROM=${SP_BASE_FROM:-debian:$SUITE-slim}
  echo "building $IMAGE from $FROM (registry path): $PACKAGES" >&2
  docker build -f "$HERE/base/Dockerfile" --build-arg FROM_IMAGE="$FROM" \
    --build-arg PACKAGES="${PACKAGES//,/ }" -t "$IMAGE" "$HERE/base" >&2
  finish
  exit 0
fi

# ---------------------------------------------------------------------------
command -v debootstrap >/dev/null || { echo "build-rootfs: debootstrap is not installed (make images installs it)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "build-rootfs: debootstrap needs root" >&2; exit 2; }
MIRROR=$("$HERE/apt-mirror.py" "$SUITE")
ROOT="$BUILD/rootfs/$NAME"
CACHE="$BUILD/debootstrap-cache"      # .debs shared by the three bases

# debootstrap mounts /proc and /sys inside the target: never delete or archive
# the tree while anything is mounted below it.
unmount_below() {
  local dir
  dir=$(readlink -f "$1" 2>/dev/null) || return 0
  awk -v d="$dir/" 'index($2 "/", d) == 1 { print $2 }' /proc/mounts | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done
}
remove_root() {
  unmount_below "$ROOT"
  if awk -v d="$(readlink -f "$ROOT" 2>/dev/null || echo "$ROOT")/" 'index($2 "/", d) == 1 { found = 1 } END { exit !found }' /proc/mounts; then
    echo "build-rootfs: something is still mounted under $ROOT; not removing it" >&2
    return 1
  fi
  rm -rf "$ROOT"
}
trap 'remove_root' EXIT

remove_root
mkdir -p "$ROOT" "$CACHE"
echo "debootstrap $SUITE ($PACKAGES) into $ROOT ..." >&2
start=$(date +%s)
if ! debootstrap --variant=minbase --include="$PACKAGES" --cache-dir="$CACHE" \
      "$SUITE" "$ROOT" "$MIRROR" > "$BUILD/debootstrap-$NAME.log" 2>&1; then
  echo "build-rootfs: debootstrap failed; last lines of $BUILD/debootstrap-$NAME.log:" >&2
  tail -n 30 "$BUILD/debootstrap-$NAME.log" >&2
  exit 1
fi
unmount_below "$ROOT"
echo "debootstrap took $(( $(date +%s) - start ))s" >&2

# PostgreSQL's package creates a default cluster; the image's entrypoint makes
# its own in a volume instead.
if [ -d "$ROOT/etc/postgresql" ]; then
  rm -rf "$ROOT"/etc/postgresql/*/main "$ROOT"/var/lib/postgresql/*/main
fi

# Keep the image small: package caches and lists, docs, man pages, logs.
rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/cache/apt/archives/partial/* \
       "$ROOT"/var/cache/apt/*.bin "$ROOT"/var/lib/apt/lists/* \
       "$ROOT"/var/cache/debconf/*-old "$ROOT"/var/lib/dpkg/*-old \
       "$ROOT"/usr/share/man/* "$ROOT"/usr/share/info/* "$ROOT"/usr/share/lintian \
       "$ROOT"/tmp/* "$ROOT"/var/tmp/* "$ROOT"/root/.cache
find "$ROOT/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete 2>/dev/null || true
find "$ROOT/usr/share/doc" -mindepth 1 -type d -empty -delete 2>/dev/null || true
find "$ROOT/usr/share/locale" -mindepth 1 -maxdepth 1 -type d ! -name 'C.UTF-8' -exec rm -rf {} + 2>/dev/null || true
find "$ROOT/var/log" -type f -delete
mkdir -p "$ROOT/var/lib/apt/lists/partial"
# Docker provides these per container.
rm -f "$ROOT/etc/hostname" "$ROOT/etc/resolv.conf"
: > "$ROOT/etc/machine-id"

echo "importing $IMAGE ($(du -sh --one-file-system "$ROOT" | cut -f1)) ..." >&2
tar --numeric-owner --one-file-system -C "$ROOT" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  --message "debootstrap --variant=minbase $SUITE + $PACKAGES" \
  - "$IMAGE" >/dev/null
finish
