# The container engine the image scripts use, and the few calls that differ between engines.
# Sourced by base.sh, build.sh and check.sh. ENGINE=docker|podman|buildah chooses; otherwise docker when
# its daemon answers, else podman, else buildah (buildah builds with --isolation chroot, so it needs no
# daemon, no user namespaces and no cgroups).
# shellcheck shell=bash

BASE_TAG=${BASE_TAG:-localhost/attnserve-base:bookworm}
CPU_TAG=${CPU_TAG:-localhost/attnserve:cpu}
GPU_TAG=${GPU_TAG:-localhost/attnserve:gpu}
EXPORT_TAG=${EXPORT_TAG:-localhost/attnserve:export}

die() { echo "FAIL: $*" >&2; exit 1; }

pick_engine() {
    if [ -n "${ENGINE:-}" ]; then echo "$ENGINE"; return; fi
    if command -v docker >/dev/null && timeout 20 docker info >/dev/null 2>&1; then echo docker; return; fi
    for engine in podman buildah; do
        if command -v "$engine" >/dev/null; then echo "$engine"; return; fi
    done
    die "no container engine: install docker (with a running daemon), podman or buildah"
}
ENGINE=$(pick_engine)

image_exists() {
    case $ENGINE in
        buildah) buildah inspect --type image "$1" >/dev/null 2>&1 ;;
        *) "$ENGINE" image inspect "$1" >/dev/null 2>&1 ;;
    esac
}

# A root filesystem tarball $1 -> a local image named $2.
engine_import() {
    case $ENGINE in
        buildah)
            local ctr
            ctr=$(buildah from scratch)
            buildah add --quiet "$ctr" "$1" / >/dev/null
            buildah config --cmd /bin/bash "$ctr"
            buildah commit --quiet --rm "$ctr" "$2" >/dev/null ;;
        *) "$ENGINE" import --change 'CMD ["/bin/bash"]' "$1" "$2" >/dev/null ;;
    esac
}

# The image's size as the engine counts it (its layers, uncompressed).
image_size() {
    case $ENGINE in
        buildah) buildah images --format '{{.Size}}' "$1" ;;
        *) echo "$(( $("$ENGINE" image inspect --format '{{.Size}}' "$1") / 1000000 )) MB" ;;
    esac
}

# docker build / podman build / buildah bud with the same arguments, at nice 10 (NICE=0: full priority; docker's
# daemon does its own scheduling). Docker's image format: the OCI format has no HEALTHCHECK.
engine_build() {
    case $ENGINE in
        docker) docker build "$@" ;;
        podman) nice -n "${NICE:-10}" podman build --isolation chroot --format docker "$@" ;;
        buildah) nice -n "${NICE:-10}" buildah bud --isolation chroot --format docker --layers "$@" ;;
    esac
}
