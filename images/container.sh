#!/bin/sh
# Steps run inside the image builds (Dockerfile.operator, Dockerfile.node), Debian or Ubuntu:
#   container.sh build-deps                install what `make build` needs
#   container.sh build VARIANT BIN...      build, strip, stage BINs in /out/bin and write the
#                                          runtime packages they need to /out/runtime-packages
#   container.sh runtime EXTRA_PKG...      install /out/runtime-packages + extras, add user
#                                          holmes (65532), empty the apt lists
#   container.sh runtime-packages BIN...   print the packages owning the libraries BINs load
#   container.sh owner PATH...             print the package owning each library path
set -eu
export DEBIAN_FRONTEND=noninteractive
APT_INSTALL="apt-get install -y -q --no-install-recommends -o Dpkg::Use-Pty=0"

build_deps() {
    apt-get update -q
    $APT_INSTALL build-essential pkg-config ca-certificates libcurl4-openssl-dev libcjson-dev \
        libwebsockets-dev libyaml-dev libibverbs-dev libopenblas-dev zlib1g-dev libssl-dev libpcre2-dev
    rm -rf /var/lib/apt/lists/*
}

# The Debian packages owning library paths (one `dpkg-query -S` for all: it is slow to start).
# ldd may print /lib/... for a file dpkg knows as /usr/lib/... (merged /usr) or the other way
# round; libraries reached through update-alternatives (libblas, libopenblas) are symlinks no
# package owns, so the file they resolve to is tried next. Prints one package per path, in
# order; fails naming the first path no package owns.
owners_of() {
    table=$(mktemp); req=$(mktemp)
    for lib in "$@"; do
        real=$(readlink -f "$lib" 2>/dev/null || echo "$lib")
        echo "$lib /usr$lib ${lib#/usr} $real /usr$real ${real#/usr}"
    done >"$req"
    tr ' ' '\n' <"$req" | sort -u | xargs dpkg-query -S 2>/dev/null |
        sed 's/^\([^:,]*\)[^ ]* \(.*\)$/\2 \1/' >"$table" || true
    awk 'NR == FNR { own[$1] = $2; next }
         { for (i = 1; i <= NF; i++) if ($i in own) { print own[$i]; next }
           print "container.sh: no package owns " $1 > "/dev/stderr"; bad = 1; exit 1 }
         END { exit bad }' "$table" "$req"
    rc=$?
    rm -f "$table" "$req"
    return $rc
}

# The packages owning every library the binaries load (ldd: direct and indirect), without
# libc6 and libgcc-s1, which every base has. Fails when a library is missing or unowned.
runtime_packages() {
    libs=""
    for b in "$@"; do
        ldd "$b" >/dev/null 2>&1 || {
            echo "container.sh: $b is not a dynamic executable ldd can read" >&2; return 1; }
        # The driver library (libcuda) comes from the host through the NVIDIA container toolkit.
        if ldd "$b" | grep 'not found' | grep -v 'libcuda\.so' >&2; then
            echo "container.sh: $b has unresolved libraries" >&2; return 1
        fi
        libs="$libs $(ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | tr '\n' ' ')"
    done
    [ -n "${libs# }" ] || return 0
    # shellcheck disable=SC2086
    pkgs=$(owners_of $libs) || return 1
    echo "$pkgs" | sort -u | grep -v -x -e libc6 -e libgcc-s1 || true
}

# The CUDA variant's holmes-node is make cuda's build/cuda/bin/holmes-node (the CUDA engines and
# NCCL linked in); NCCL comes from Ubuntu's libnccl-dev in NVIDIA's devel images (/usr), or from
# the CUDA tree.
build() {
    variant=$1; shift
    # shellcheck disable=SC2046
    make -j"$(nproc)" VARIANT=release $(printf "bin/%s " "$@")
    src=bin
    if [ "$variant" = cuda ]; then
        nccl="NCCL_HOME=/usr/local/cuda"
        if [ -f /usr/include/nccl.h ]; then
            nccl="NCCL_HOME=/usr NCCL_LIBDIR=/usr/lib/$(gcc -dumpmachine)"
        fi
        # shellcheck disable=SC2086
        make -j"$(nproc)" VARIANT=release $nccl cuda
        src=build/cuda/bin
        for b in "$@"; do
            [ "$b" != holmes-node ] || "$src/$b" engines | grep -qx cuda-bf16 || {
                echo "container.sh: $src/$b has no CUDA engine" >&2; exit 1; }
        done
    fi
    mkdir -p /out/bin
    for b in "$@"; do
        [ -x "$src/$b" ] || { echo "container.sh: $src/$b was not built" >&2; exit 1; }
        strip --strip-unneeded -o "/out/bin/$b" "$src/$b"
    done
    (cd "$src" && runtime_packages "$@") >/out/runtime-packages || exit 1
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
    runtime-packages) runtime_packages "$@" ;;
    owner) owners_of "$@" ;;
    *) echo "container.sh: unknown step $cmd" >&2; exit 2 ;;
esac
