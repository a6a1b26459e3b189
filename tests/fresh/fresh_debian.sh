#!/usr/bin/env bash
# The README's promise, checked from nothing: a fresh Debian 12 (debootstrap --variant=minbase
# of bookworm from this machine's mirror), a clean clone of HEAD (committed files only) in
# /root/holmes, and inside a chroot, as root, the shell block under "## Two commands" in
# README.md, line by line, as a user would type it (it must hold `make run` before
# `make test`). Fails when any line fails. `make test-fresh` runs it; .ci/run too.
#
# The bootstrapped root is cached as a tarball under .cache/fresh/ (git-ignored) for
# FRESH_CACHE_DAYS days (default 7; 0 = always bootstrap anew); with no cache it is made
# from nothing. The root itself, /proc, /sys, /dev and /run (a tmpfs, as on a booted machine:
# `ip netns` needs /run/netns) are mounted in a private mount namespace, so they never show on the host
# and go with it; the exit trap kills what is left running in the root and removes it.
# FRESH_KEEP=1 keeps the root (its path is printed). Needs root, debootstrap (installed if
# missing), network access to the Debian mirror (and to what `make run` itself fetches).
{ # parsed whole before it runs: editing this file during a run (it is long) leaves the run be
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
SUITE=bookworm
log() { echo "fresh: $*"; }
die() { echo "fresh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (debootstrap, chroot, mounts)"
command -v debootstrap >/dev/null || scripts/deps.sh debootstrap
command -v unshare >/dev/null || die "needs unshare (util-linux)"

mirror=$(scripts/debian-mirror.sh) || die "no Debian mirror"
security=$(scripts/debian-mirror.sh security)

# The README's block: the lines between "```sh" and "```" after "## Two commands".
block=$(awk '/^## Two commands/ {s=1; next} s && /^## / {exit} s && /^```sh/ {b=1; next}
             b && /^```/ {exit} b {print}' README.md)
run_line=$(grep -n '^make run\b' <<<"$block" | head -1 | cut -d: -f1)
test_line=$(grep -n '^make test\b' <<<"$block" | head -1 | cut -d: -f1)
[ -n "$run_line" ] && [ -n "$test_line" ] && [ "$run_line" -lt "$test_line" ] ||
    die "README.md's \"Two commands\" block does not hold 'make run' before 'make test':
$block"

work=$(mktemp -d /var/tmp/holmes-fresh.XXXXXX)
root=$work/root
mkdir "$root"
cleanup() {
    local rc=$? pid n=0
    set +e
    # Whatever still runs inside the root (a daemon a test left behind) keeps its mount
    # namespace alive; end it, by id, so nothing holds the root.
    for pid in $(ls /proc | grep -E '^[0-9]+$'); do
        [ "$(readlink "/proc/$pid/root" 2>/dev/null)" = "$root" ] && { kill -9 "$pid" 2>/dev/null || true; n=$((n + 1)); }
    done
    [ $n -gt 0 ] && log "killed $n process(es) left in the root"
    # The mounts live in unshare's namespace; should one show here anyway, unmount it.
    findmnt -rn -o TARGET | grep -F "$root/" | sort -r | while read -r m; do umount -l "$m" || true; done
    if grep -qF "$root/" <<<"$(findmnt -rn -o TARGET)"; then # (no `| grep -q` under pipefail)
        echo "fresh: mounts left under $root; not removing it" >&2
    elif [ "${FRESH_KEEP:-0}" = 1 ]; then
        log "kept $root"
    else
        rm -rf --one-file-system "$work"
    fi
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- a fresh Debian 12 --------------------------------------------------------------------
cache=$REPO/.cache/fresh
tarball=$cache/$SUITE-minbase.tar
stamp="$SUITE minbase $mirror"
days=${FRESH_CACHE_DAYS:-7}
t0=$SECONDS
if [ "$days" != 0 ] && [ -f "$tarball" ] && [ "$(cat "$tarball.key" 2>/dev/null)" = "$stamp" ] &&
   [ -n "$(find "$tarball" -mtime "-$days" 2>/dev/null)" ]; then
    log "root from $tarball (made $(date -r "$tarball" '+%F %H:%M'))"
    tar -C "$root" --numeric-owner -xpf "$tarball"
else
    log "debootstrap --variant=minbase $SUITE from $mirror"
    debootstrap --variant=minbase "$SUITE" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 || {
        tail -20 "$work/debootstrap.log" >&2; die "debootstrap failed"; }
    # What a Debian install leaves that debootstrap does not: apt sources with updates and
    # security, a hosts file naming localhost.
    {
        echo "deb $mirror $SUITE main"
        echo "deb $mirror $SUITE-updates main"
        [ -z "$security" ] || echo "deb $security $SUITE-security main"
    } >"$root/etc/apt/sources.list"
    printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
    rm -rf "$root"/var/cache/apt/archives/*.deb
    mkdir -p "$cache"
    tar -C "$root" --numeric-owner -cpf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    echo "$stamp" >"$tarball.key"
fi
log "root ready in $((SECONDS - t0)) s"
# This machine's network set-up, as its admins would have made it on any machine here: the
# resolver, the certificate authorities it trusts (a TLS-intercepting proxy's, say: npm
# failed with SELF_SIGNED_CERT_IN_CHAIN without them) and npm's site config naming them.
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    mkdir -p "$root/usr/local/share/ca-certificates"
    cp -L /etc/ssl/certs/ca-certificates.crt "$root/usr/local/share/ca-certificates/fresh-host-trust.crt"
fi
[ ! -f /etc/npmrc ] || cp -L /etc/npmrc "$root/etc/npmrc"
echo holmes-fresh >"$root/etc/hostname"
# In a chroot nothing may start services (a booted machine would; the tests start none).
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"; chmod +x "$root/usr/sbin/policy-rc.d"

# --- a clean clone of HEAD ----------------------------------------------------------------
head=$(git rev-parse HEAD)
git clone -q --no-hardlinks "$REPO" "$root/root/holmes"
git -C "$root/root/holmes" checkout -q --detach "$head"
[ -z "$(git status --porcelain 2>/dev/null)" ] || log "note: uncommitted changes here are not in the clone"
log "clone of $(git log -1 --format='%h %s' "$head" | cut -c1-72)"
# The block as a script: each line echoed with the time before it runs, the first failure ends it.
{ echo "PS4='+ \$(date +%T) '"; echo 'set -ex'; printf '%s\n' "$block"; } >"$root/root/readme-two-commands.sh"

# --- the README, inside the root ----------------------------------------------------------
log "running README.md's block in the chroot:"
sed 's/^/fresh:   | /' <<<"$block"
# The root bound onto itself first, so that / in the chroot is a mount point, as on a booted
# machine (`ip netns exec` runs `mount --make-rslave /`, which fails with EINVAL otherwise).
inner='set -e
mount --bind "$R" "$R"
mount -t proc proc "$R/proc"
mount -t sysfs sysfs "$R/sys"
mount --rbind /dev "$R/dev"
mount -t tmpfs -o mode=755 tmpfs "$R/run"
mkdir -p "$R/run/lock"
exec chroot "$R" /usr/bin/env -i HOME=/root USER=root LOGNAME=root TERM=dumb SHELL=/bin/bash \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash -c "cd /root/holmes && exec bash /root/readme-two-commands.sh"'
t1=$SECONDS
rc=0
R=$root unshare --mount --propagation private -- /bin/bash -c "$inner" || rc=$?
if [ $rc -ne 0 ]; then
    die "README.md's commands failed in a fresh Debian 12 (exit $rc, after $((SECONDS - t1)) s)"
fi
log "README.md's commands passed in a fresh Debian 12 ($((SECONDS - t1)) s; $((SECONDS - t0)) s in all)"
exit 0
}
