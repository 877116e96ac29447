#!/usr/bin/env bash
# `make image`: the CPU and the GPU image from the repository's Dockerfile, with whatever engine this host has
# (engine.sh). BASE_IMAGE unset: both build FROM a Debian 12 base made here with debootstrap (base.sh), for hosts
# no registry serves; BASE_IMAGE=debian:bookworm-slim builds from the registry's instead.
#   deploy/image/build.sh [cpu] [gpu]     (default both; BUNDLE_SRC=bundles/default bakes the bundle in)
# Prints each image's size and build time. Builds run at nice 10 (NICE=0 for full priority).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=deploy/image/engine.sh
. "$here/engine.sh"

flavours=("$@")
[ ${#flavours[@]} -gt 0 ] || flavours=(cpu gpu)
bundle_src=${BUNDLE_SRC:-deploy/bundle-placeholder}

if [ -z "${BASE_IMAGE:-}" ]; then
    BASE_IMAGE=$BASE_TAG
    start=$SECONDS
    nice -n "${NICE:-10}" "$here/base.sh" "$BASE_IMAGE"
    echo "base: $BASE_IMAGE ready in $((SECONDS - start)) s"
fi

summary=()
for flavour in "${flavours[@]}"; do
    case $flavour in
        cpu) tag=$CPU_TAG ;;
        gpu) tag=$GPU_TAG ;;
        *) die "unknown flavour $flavour (cpu or gpu)" ;;
    esac
    echo "== $flavour image $tag ($ENGINE, FROM $BASE_IMAGE)"
    start=$SECONDS
    engine_build --tag "$tag" --file "$root/Dockerfile" --build-arg "BASE_IMAGE=$BASE_IMAGE" \
        --build-arg "ORT_EXTRA=$flavour" --build-arg "BUNDLE_SRC=$bundle_src" "$root" \
        || die "the $flavour image did not build"
    summary+=("$flavour image $tag: $(image_size "$tag"), built in $((SECONDS - start)) s")
done
printf '%s\n' "${summary[@]}"
