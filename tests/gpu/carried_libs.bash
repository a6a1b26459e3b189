# carried_libs NODE_BIN: a holmes-node carried from a build machine (make gpu-carry) runs with the
# Debian libraries carried beside it (debs/), unpacked there once (root/) and put on
# LD_LIBRARY_PATH. Nothing when the binary resolves its libraries here. Sourced by the GPU scripts.
carried_libs() {
    local node=$1 dir d
    dir=$(cd "$(dirname "$node")" && pwd)
    if ldd "$node" 2>/dev/null | grep -q 'not found' && [ -d "$dir/debs" ]; then
        [ -d "$dir/root" ] || for d in "$dir"/debs/*.deb; do dpkg -x "$d" "$dir/root" || return 1; done
        export LD_LIBRARY_PATH="$dir/root/usr/lib/x86_64-linux-gnu:$dir/root/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
}
