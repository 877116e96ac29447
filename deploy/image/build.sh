#!/usr/bin/env bash
# `make image`: the CPU and the GPU serving image from the repository's Dockerfile and the export image (torch CPU,
# `attnserve pull`) from Dockerfile.export, with whatever engine this host has (engine.sh). BASE_IMAGE unset: all
# build FROM a Debian 12 base made here with debootstrap (base.sh), for hosts no registry serves;
# BASE_IMAGE=debian:bookworm-slim builds from the registry's instead.
#   deploy/image/build.sh [cpu] [gpu] [export]     (default all three; BUNDLE_SRC=bundles/default bakes the bundle
#                                                   into the serving images)
# The export image takes torch from the CPU index (TORCH_INDEX); where that cannot be reached, TORCH_WHEEL=a CPU
# wheel of the pinned torch is copied into deploy/wheels/ for the build (and the index is not asked).
# Prints each image's size and build time. Builds run at nice 10 (NICE=0 for full priority).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=deploy/image/engine.sh
. "$here/engine.sh"

flavours=("$@")
[ ${#flavours[@]} -gt 0 ] || flavours=(cpu gpu export)
bundle_src=${BUNDLE_SRC:-deploy/bundle-placeholder}

# TORCH_WHEEL: copied into the build context for the export image, removed again however the build ends.
if [ -n "${TORCH_WHEEL:-}" ]; then
    [ -f "$TORCH_WHEEL" ] || die "TORCH_WHEEL=$TORCH_WHEEL is not a file"
    wheel_copy="$root/deploy/wheels/$(basename "$TORCH_WHEEL")"
    trap 'rm -f "$wheel_copy"' EXIT
    cp "$TORCH_WHEEL" "$wheel_copy"
fi

if [ -z "${BASE_IMAGE:-}" ]; then
    BASE_IMAGE=$BASE_TAG
    start=$SECONDS
    nice -n "${NICE:-10}" "$here/base.sh" "$BASE_IMAGE"
    echo "base: $BASE_IMAGE ready in $((SECONDS - start)) s"
fi

summary=()
for flavour in "${flavours[@]}"; do
    # The serving images differ in their onnxruntime; the export image is its own file, its torch from TORCH_INDEX
    # or, with TORCH_WHEEL, from deploy/wheels/ alone (an empty TORCH_INDEX).
    case $flavour in
        cpu | gpu)
            [ "$flavour" = cpu ] && tag=$CPU_TAG || tag=$GPU_TAG
            args=(--file "$root/Dockerfile" --build-arg "ORT_EXTRA=$flavour" --build-arg "BUNDLE_SRC=$bundle_src") ;;
        export)
            tag=$EXPORT_TAG
            args=(--file "$root/Dockerfile.export")
            [ -z "${TORCH_WHEEL:-}" ] || args+=(--build-arg "TORCH_INDEX=")
            [ -z "${TORCH_INDEX:-}" ] || args+=(--build-arg "TORCH_INDEX=$TORCH_INDEX") ;;
        *) die "unknown flavour $flavour (cpu, gpu or export)" ;;
    esac
    echo "== $flavour image $tag ($ENGINE, FROM $BASE_IMAGE)"
    start=$SECONDS
    engine_build --tag "$tag" "${args[@]}" --build-arg "BASE_IMAGE=$BASE_IMAGE" "$root" \
        || die "the $flavour image did not build"
    summary+=("$flavour image $tag: $(image_size "$tag"), built in $((SECONDS - start)) s")
done
printf '%s\n' "${summary[@]}"
