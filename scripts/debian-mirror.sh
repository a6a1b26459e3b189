#!/bin/sh
# Prints the Debian mirror this machine's apt uses (deb822 or one-line format), unless
# DEBIAN_MIRROR says; `debian-mirror.sh security` prints the security mirror instead (empty
# when apt has none). Exits 1, with a message, when no main mirror is found.
# Used by images/mkbase.sh and tests/fresh/fresh_debian.sh (both debootstrap bookworm).
set -eu
if [ "${1:-}" = security ]; then
    m=${DEBIAN_SECURITY_MIRROR:-}
    [ -n "$m" ] || m=$(awk '/^URIs:/ && $2 ~ /security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
    [ -n "$m" ] || m=$(awk '$1 == "deb" && $2 ~ /security/ && $2 !~ /^\[/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
    echo "$m"
    exit 0
fi
m=${DEBIAN_MIRROR:-}
[ -n "$m" ] || m=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
[ -n "$m" ] || m=$(awk '$1 == "deb" && $2 !~ /security/ && $2 !~ /^\[/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$m" ] || { echo "no Debian mirror found in /etc/apt; set DEBIAN_MIRROR" >&2; exit 1; }
echo "$m"
