# Fast, daemonless checks on images/ that run with `make test` (building and running the
# images is `make images test-images`): scripts parse, the runtime-package mapping the image
# builds use (images/container.sh) finds the right packages and refuses unresolved libraries,
# the Dockerfiles' final stages run as non-root, containers.conf has the settings CI needs.
source "$(dirname "$0")/lib.bash"
CS=$REPO/images/container.sh
tmp=$(mktemp -d /tmp/holmes-images.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

sh -n "$CS" && pass "container.sh parses" || fail "container.sh parses"
ok=1; for s in build.sh mkbase.sh smoke.sh; do bash -n "$REPO/images/$s" || ok=0; done
[ $ok = 1 ] && pass "build.sh, mkbase.sh, smoke.sh parse" || fail "build.sh, mkbase.sh, smoke.sh parse"

# The packages a runtime stage installs for holmes-node: those owning every library it loads.
if "$CS" runtime-packages "$NODE" >"$tmp/pkgs" 2>"$tmp/err"; then
    # Independently: every file ldd resolves, asked of dpkg at its real path (with and without /usr).
    for lib in $(ldd "$NODE" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'); do
        r=$(readlink -f "$lib"); echo "$r"; echo "/usr$r"; echo "${r#/usr}"
    done | sort -u | xargs dpkg-query -S 2>/dev/null | cut -d: -f1 | sort -u |
        grep -v -x -e libc6 -e libgcc-s1 >"$tmp/want"
    if grep -qx libcjson1 "$tmp/pkgs" && diff "$tmp/want" "$tmp/pkgs" >"$tmp/diff"; then
        pass "runtime packages of holmes-node: the owners of every library it loads ($(wc -l <"$tmp/pkgs"))"
    else
        fail "runtime packages of holmes-node: the owners of every library it loads" "$(cat "$tmp/diff")"
    fi
else
    fail "runtime packages of holmes-node" "$(cat "$tmp/err")"
fi

# update-alternatives symlinks (libblas.so.3) belong to no package; the file they point at does.
blas=/usr/lib/x86_64-linux-gnu/libblas.so.3
if [ -e "$blas" ]; then
    out=$("$CS" owner "$blas") && [[ $out == libopenblas* || $out == libblas3 ]] &&
        pass "owner of an alternatives symlink ($blas: $out)" || fail "owner of an alternatives symlink" "$out"
fi

# A binary whose library is gone must stop the image build, naming the library.
printf 'int holmes_probe(void) { return 7; }\n' >"$tmp/probe.c"
printf 'int holmes_probe(void);\nint main(void) { return holmes_probe() == 7 ? 0 : 1; }\n' >"$tmp/main.c"
if cc -shared -fPIC -o "$tmp/libholmesprobe.so" "$tmp/probe.c" &&
    cc -o "$tmp/probe" "$tmp/main.c" -L"$tmp" -lholmesprobe -Wl,-rpath,"$tmp"; then
    "$CS" runtime-packages "$tmp/probe" >/dev/null 2>"$tmp/err1"
    [ $? -ne 0 ] && grep -q "no package owns $tmp/libholmesprobe.so" "$tmp/err1" &&
        pass "a library no package owns stops the build" || fail "a library no package owns stops the build" "$(cat "$tmp/err1")"
    rm "$tmp/libholmesprobe.so"
    "$CS" runtime-packages "$tmp/probe" >/dev/null 2>"$tmp/err2"
    [ $? -ne 0 ] && grep -q 'libholmesprobe.so => not found' "$tmp/err2" &&
        pass "an unresolved library stops the build" || fail "an unresolved library stops the build" "$(cat "$tmp/err2")"
else
    fail "compile the probe binary" "cc failed"
fi
"$CS" runtime-packages "$tmp/nonexistent" >/dev/null 2>&1 && fail "a missing binary stops the build" ||
    pass "a missing binary stops the build"

# Final stages: non-root user, entrypoint the binary; CPU builds need no image from a registry.
for f in operator node; do
    df=$REPO/images/Dockerfile.$f
    final=$(awk '/^FROM /{buf=""} {buf = buf $0 "\n"} END {printf "%s", buf}' "$df")
    grep -q '^USER 65532:65532$' <<<"$final" && grep -q "^ENTRYPOINT \[\"holmes-$f" <<<"$final" &&
        pass "Dockerfile.$f: final stage runs holmes-$f as 65532" || fail "Dockerfile.$f: final stage runs holmes-$f as 65532"
done
grep -q '^ARG BASE_IMAGE=debian:12-slim$' "$REPO/images/Dockerfile.operator" &&
    ! grep -E '^FROM ' "$REPO/images/Dockerfile.operator" | grep -vq 'BASE_IMAGE' &&
    pass "Dockerfile.operator: every stage on debian:12-slim" || fail "Dockerfile.operator: every stage on debian:12-slim"
conf=$REPO/images/containers.conf
grep -qF 'default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]' "$conf" && grep -qF 'runtime = "runc"' "$conf" &&
    grep -qF 'cgroup_manager = "cgroupfs"' "$conf" && pass "containers.conf: ulimits, runc, cgroupfs" ||
    fail "containers.conf: ulimits, runc, cgroupfs"
