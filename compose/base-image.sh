#!/usr/bin/env bash
# Builds a base image for the member image WITHOUT an image registry: Debian's minbase (debootstrap) with python3,
# trimmed (no apt lists, docs, man pages or locales), imported with `docker import`. For machines that cannot pull
# python:3.12-slim (the Dockerfile's default base); the docker tests and CI use it.
#
#   compose/base-image.sh [IMAGE]          default IMAGE: chaosbed-base:bookworm
#
# Cached twice: the image in the engine (nothing to do if it exists) and the root file system's tarball in
# $CHAOSBED_CACHE (default /var/cache/chaosbed), so a fresh engine imports it in seconds instead of bootstrapping.
# Needs root and debootstrap (Debian: apt-get install debootstrap) and access to a Debian mirror ($DEBIAN_MIRROR).
set -euo pipefail
IMAGE=${1:-chaosbed-base:bookworm}
SUITE=${DEBIAN_SUITE:-bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
CACHE=${CHAOSBED_CACHE:-/var/cache/chaosbed}
TARBALL="$CACHE/base-$SUITE-minbase-python3.tar"

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "base-image: $IMAGE is there"
  exit 0
fi
if [ ! -s "$TARBALL" ]; then
  [ "$(id -u)" = 0 ] || { echo "base-image: debootstrap needs root" >&2; exit 1; }
  command -v debootstrap >/dev/null || { echo "base-image: no debootstrap (apt-get install debootstrap)" >&2; exit 1; }
  mkdir -p "$CACHE"
  ROOTFS=$(mktemp -d "$CACHE/rootfs.XXXXXX")
  cleanup() {
    # debootstrap mounts /proc and /sys inside the root file system: never leave them mounted, also on failure
    for m in $(awk -v r="$ROOTFS" '$2 ~ "^"r {print $2}' /proc/mounts | sort -r); do umount -l "$m" || true; done
    rm -rf "$ROOTFS" "$TARBALL.tmp"
  }
  trap cleanup EXIT
  echo "base-image: debootstrap $SUITE (minbase + python3) from $MIRROR, about 1-2 minutes"
  debootstrap --variant=minbase --include=python3 "$SUITE" "$ROOTFS" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 || {
    tail -20 "$CACHE/debootstrap.log" >&2
    exit 1
  }
  rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/* "$ROOTFS"/usr/share/{doc,man,info,locale}/*
  tar -C "$ROOTFS" --numeric-owner --exclude=./proc/* --exclude=./sys/* --exclude=./dev/* -cf "$TARBALL.tmp" .
  mv "$TARBALL.tmp" "$TARBALL"
fi
docker import --change 'CMD ["python3"]' --message "chaosbed base: debootstrap $SUITE minbase + python3" \
  "$TARBALL" "$IMAGE" >/dev/null
echo "base-image: imported $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1/1e6}'))"
