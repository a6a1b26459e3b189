#!/usr/bin/env bash
# Builds the images without a Docker daemon: the local debian:12-slim base (mkbase.sh), then
# `buildah bud --isolation chroot --pull=never` for the operator and the CPU worker image.
# The CUDA worker image needs NVIDIA's base images, which CI cannot fetch: build it with
#   IMAGES="node-cuda" images/build.sh       (on a machine that can pull nvidia/cuda)
# Env: IMAGES (default "operator node-cpu"), REPO_PREFIX (default localhost/holmes), TAG
# (default: the version in common/version.h).
set -euo pipefail
cd "$(dirname "$0")/.."
source images/env.bash
IMAGES=${IMAGES:-operator node-cpu}

bud() { # tag, dockerfile, extra args...
    local tag=$1 file=$2; shift 2
    local start=$SECONDS
    echo "images: building $tag from $file"
    buildah bud --isolation chroot --layers --force-rm --quiet -f "$file" -t "$tag" "$@" . >/dev/null
    echo "images: $tag built in $((SECONDS - start)) s, $(podman image inspect --format '{{.Size}}' "$tag" | awk '{printf "%.1f MB", $1 / 1e6}')"
}

if [[ " $IMAGES " == *" operator "* || " $IMAGES " == *" node-cpu "* ]]; then
    images/mkbase.sh
fi
for img in $IMAGES; do
    case $img in
        operator) bud "$REPO_PREFIX/holmes-operator:$TAG" images/Dockerfile.operator --pull=never ;;
        node-cpu) bud "$REPO_PREFIX/holmes-node:$TAG-cpu" images/Dockerfile.node --pull=never --build-arg VARIANT=cpu ;;
        node-cuda) bud "$REPO_PREFIX/holmes-node:$TAG" images/Dockerfile.node --build-arg VARIANT=cuda ;;
        *) echo "images: unknown image '$img' (operator, node-cpu, node-cuda)" >&2; exit 2 ;;
    esac
done
