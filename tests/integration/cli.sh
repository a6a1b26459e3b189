# Both binaries answer --version and --help.
source "$(dirname "$0")/lib.bash"
for b in "$OPERATOR" "$NODE"; do
    n=$(basename "$b")
    out=$("$b" --version) && [[ $out == "$n 0."* ]] && pass "$n --version" || fail "$n --version" "$out"
    "$b" --help | grep -q '^Commands:' && pass "$n --help" || fail "$n --help"
    "$b" no-such-command 2>/dev/null; [ $? -eq 2 ] && pass "$n unknown command" || fail "$n unknown command"
done

# holmes-node worker --help documents both modes and every flag either mode parses, and
# holmes-node train --help every flag it parses (the flags are read from the sources, the
# training flags both share from cmd_spec.c, so a new flag without help fails here).
flags_of() { grep -hoE 'strcmp\((a|f), "--[a-z-]*"\)' "$@" | sed 's/.*"\(--[a-z-]*\)".*/\1/' | sort -u; }
help=$("$NODE" worker --help 2>&1); rc=$?
missing=""
src=("$REPO/noderuntime/cmd/cmd_worker.c" "$REPO/noderuntime/cmd/cmd_worker_coord.c" "$REPO/noderuntime/cmd/cmd_spec.c")
for flag in $(flags_of "${src[@]}"); do
    grep -q -- "$flag\b" <<<"$help" || missing="$missing $flag"
done
nflags=$(flags_of "${src[@]}" | wc -l)
[ $rc -eq 0 ] && [ -z "$missing" ] && [ "$nflags" -ge 30 ] \
    && grep -q 'coordinator mode' <<<"$help" && grep -q 'rank-table mode' <<<"$help" \
    && pass "worker --help names both modes and all $nflags flags" \
    || fail "worker --help names both modes and every flag" "rc $rc, $nflags flags, missing:$missing"
thelp=$("$NODE" train --help 2>&1); rc=$?
missing=""
tsrc=("$REPO/noderuntime/cmd/cmd_train.c" "$REPO/noderuntime/cmd/cmd_spec.c")
for flag in $(flags_of "${tsrc[@]}"); do
    grep -q -- "$flag\b" <<<"$thelp" || missing="$missing $flag"
done
[ $rc -eq 0 ] && [ -z "$missing" ] && [ "$(flags_of "${tsrc[@]}" | wc -l)" -ge 25 ] \
    && pass "train --help names all its flags" || fail "train --help names every flag" "rc $rc, missing:$missing"
chelp=$("$NODE" worker --coordinator ws://x --help 2>&1)
[ "$chelp" = "$help" ] && pass "worker --coordinator URL --help prints the same help" \
    || fail "worker --coordinator URL --help prints the same help" "$(head -3 <<<"$chelp")"
