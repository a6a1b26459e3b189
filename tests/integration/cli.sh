# Both binaries answer --version and --help.
source "$(dirname "$0")/lib.bash"
for b in "$OPERATOR" "$NODE"; do
    n=$(basename "$b")
    out=$("$b" --version) && [[ $out == "$n 0."* ]] && pass "$n --version" || fail "$n --version" "$out"
    "$b" --help | grep -q '^Commands:' && pass "$n --help" || fail "$n --help"
    "$b" no-such-command 2>/dev/null; [ $? -eq 2 ] && pass "$n unknown command" || fail "$n unknown command"
done
