#!/bin/sh
# Steps run inside the image builds (Dockerfile.operator, Dockerfile.node), Debian or Ubuntu:
#   container.sh build-deps                install what `make build` needs
#   container.sh build VARIANT BIN...      build, strip, stage BINs in /out/bin and write the
#                                          runtime packages they need to /out/runtime-packages
#   container.sh runtime EXTRA_PKG...      install /out/runtime-packages + extras, add user
#                                          holmes (65532), empty the apt lists
set -eu
export DEBIAN_FRONTEND=noninteractive
APT_INSTALL="apt-get install -y -q --no-install-recommends -o Dpkg::Use-Pty=0"

build_deps() {
    apt-get update -q
    $APT_INSTALL build-essential pkg-config ca-certificates libcurl4-openssl-dev libcjson-dev \
        libwebsockets-dev libyaml-dev libibverbs-dev libopenblas-dev zlib1g-dev libssl-dev
    rm -rf /var/lib/apt/lists/*
}

# The Debian package owning a library path; ldd may print /lib/... for a file dpkg knows as
# /usr/lib/... (merged /usr) or the other way round.
owner_of() {
    for p in "$1" "/usr$1" "${1#/usr}"; do
        out=$(dpkg-query -S "$p" 2>/dev/null | head -1) && [ -n "$out" ] && { echo "${out%%:*}"; return 0; }
    done
    return 1
}

build() {
    variant=$1; shift
    # shellcheck disable=SC2046
    make -j"$(nproc)" VARIANT=release $(printf "bin/%s " "$@")
    if [ "$variant" = cuda ]; then make VARIANT=release cuda; fi
    mkdir -p /out/bin
    : >/out/runtime-packages.all
    for b in "$@"; do
        [ -x "bin/$b" ] || { echo "container.sh: bin/$b was not built" >&2; exit 1; }
        strip --strip-unneeded -o "/out/bin/$b" "bin/$b"
        # The driver library (libcuda) comes from the host through the NVIDIA container toolkit.
        if ldd "bin/$b" | grep 'not found' | grep -v 'libcuda\.so'; then
            echo "container.sh: bin/$b has unresolved libraries" >&2; exit 1
        fi
        ldd "bin/$b" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r lib; do
            owner_of "$lib" || { echo "container.sh: no package owns $lib" >&2; exit 1; }
        done >>/out/runtime-packages.all
    done
    sort -u /out/runtime-packages.all | grep -v -x -e libc6 -e libgcc-s1 >/out/runtime-packages || true
    rm /out/runtime-packages.all
    echo "container.sh: runtime packages: $(tr '\n' ' ' </out/runtime-packages)"
}

runtime() {
    apt-get update -q
    # shellcheck disable=SC2046
    $APT_INSTALL $(cat /out/runtime-packages) "$@"
    rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log
    groupadd --system --gid 65532 holmes
    useradd --no-log-init --uid 65532 --gid 65532 --home-dir /var/lib/holmes --create-home \
        --shell /usr/sbin/nologin holmes
    rm -rf /out
}

cmd=${1:?usage: container.sh build-deps|build|runtime}; shift
case $cmd in
    build-deps) build_deps ;;
    build) build "$@" ;;
    runtime) runtime "$@" ;;
    *) echo "container.sh: unknown step $cmd" >&2; exit 2 ;;
esac
