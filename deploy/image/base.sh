#!/usr/bin/env bash
# A Debian 12 (bookworm) base image made from Debian's own packages, for hosts where no registry serves
# base images: debootstrap's minbase variant plus python3 and python3-venv, the host's CA bundle copied in
# (so pip inside the build trusts what the host trusts), imported as a local image. `make image` builds
# FROM it (BASE_IMAGE); where a registry serves debian:bookworm-slim this step is not needed.
#   deploy/image/base.sh [TAG]          (ENGINE=docker|podman|buildah, DEBIAN_MIRROR=..., REBUILD=1)
# An image already under TAG is kept (REBUILD=1 makes it again).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=deploy/image/engine.sh
. "$here/engine.sh"

tag=${1:-$BASE_TAG}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
ca=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

if [ -z "${REBUILD:-}" ] && image_exists "$tag"; then
    echo "base image $tag exists (REBUILD=1 makes it again)"
    exit 0
fi
command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"
[ -f "$ca" ] || die "no CA bundle at $ca (CA_BUNDLE=...)"

rootfs=$(mktemp -d /var/tmp/attnserve-rootfs.XXXXXX)
trap 'rm -rf "$rootfs" "$rootfs.tar"' EXIT
echo "debootstrap bookworm (minbase + python3, python3-venv) from $mirror"
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$rootfs" "$mirror" \
    >"$rootfs.log" 2>&1 || { tail -20 "$rootfs.log"; die "debootstrap failed (log: $rootfs.log)"; }
rm -f "$rootfs.log"
install -D -m 0644 "$ca" "$rootfs/etc/ssl/certs/ca-certificates.crt"
# Docker's debian images ship these sources; apt inside the image then finds updates as they do.
printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb http://deb.debian.org/debian-security bookworm-security main\n' \
    "$mirror" "$mirror" >"$rootfs/etc/apt/sources.list"
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb \
    "$rootfs"/var/log/*.log "$rootfs"/tmp/* "$rootfs"/root/.cache
tar -C "$rootfs" --numeric-owner -cf "$rootfs.tar" .
engine_import "$rootfs.tar" "$tag"
rm -f "$rootfs.tar"
echo "base image $tag: $(image_size "$tag")"
