#!/usr/bin/env bash
# Makes the debian:12-slim base image locally, without a registry: debootstrap (minbase)
# of bookworm from this machine's own Debian mirror, trimmed the way the official slim
# image is (no docs, man pages or locales, dpkg told to keep them out, apt lists and caches
# emptied), then imported with `podman import` as docker.io/library/debian:12-slim so that
# `FROM debian:12-slim` resolves with `--pull=never`.
# Idempotent: does nothing when the image already exists (FORCE=1 rebuilds it).
# Usage: images/mkbase.sh    (root; needs debootstrap and podman)
set -euo pipefail
cd "$(dirname "$0")/.."
export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/images/containers.conf}
IMAGE=${BASE_IMAGE:-docker.io/library/debian:12-slim}
SUITE=bookworm

if [ "${FORCE:-0}" != 1 ] && podman image exists "$IMAGE"; then
    echo "mkbase: $IMAGE already present"
    exit 0
fi

# The mirror this machine's apt uses, unless DEBIAN_MIRROR says (scripts/debian-mirror.sh).
mirror=$(scripts/debian-mirror.sh) || { echo "mkbase: no Debian mirror" >&2; exit 1; }

root=$(mktemp -d /var/tmp/holmes-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo "mkbase: debootstrap --variant=minbase $SUITE from $mirror"
debootstrap --variant=minbase "$SUITE" "$root" "$mirror" >"$root.log" 2>&1 || {
    tail -20 "$root.log" >&2; rm -f "$root.log"; echo "mkbase: debootstrap failed" >&2; exit 1; }
rm -f "$root.log"

# Keep documentation out of later installs, as the slim image does.
cat >"$root/etc/dpkg/dpkg.cfg.d/holmes-slim" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
CFG
# apt inside images: no recommends, no cached .debs, no translations.
cat >"$root/etc/apt/apt.conf.d/holmes-slim" <<'CFG'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Languages "none";
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
CFG
printf 'deb %s %s main\ndeb %s %s-updates main\n' "$mirror" "$SUITE" "$mirror" "$SUITE" \
    >"$root/etc/apt/sources.list"

# Trim what debootstrap left behind.
find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete 2>/dev/null || true
find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete 2>/dev/null || true
rm -rf "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/groff/* \
       "$root"/usr/share/lintian/* "$root"/usr/share/linda/*
find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} + 2>/dev/null || true
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
       "$root"/var/log/* "$root"/tmp/* "$root"/var/tmp/* "$root"/dev/*
: >"$root/etc/machine-id"
rm -f "$root"/etc/hostname "$root"/etc/resolv.conf

echo "mkbase: importing as $IMAGE"
tar --numeric-owner --xattrs -C "$root" -c . |
    podman import --quiet --change 'CMD ["bash"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        - "$IMAGE" >/dev/null
podman image inspect --format 'mkbase: {{.Id}} {{.Size}} bytes' "$IMAGE"
