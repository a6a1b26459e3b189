# The README's order on a fresh machine, cheaply: in a copy of the tree with no build outputs
# (no .deps-ok, build/, bin/, tools/), `make -n` of each target README.md names prints the
# installation of the Debian packages (scripts/deps.sh ... build-essential ...) before the
# first compiler or archiver call.
# `make run` and `make test` must print both (README: they install what is missing).
# The full check, a real fresh Debian 12, is `make test-fresh` (tests/fresh/fresh_debian.sh).
# MAKEFILE_UNDER_TEST=FILE checks that Makefile instead of the tree's (e.g. an old one).
source "$(dirname "$0")/lib.bash"
if [ "${HOLMES_VARIANT:-release}" != release ]; then
    echo "SKIP make_order: make's order does not depend on the variant (checked in the release pass)"
    exit 0
fi
tmp=$(mktemp -d /tmp/holmes-make-order.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
tree=$tmp/tree
mkdir "$tree"
# The tree as a fresh clone has it: what .gitignore lists (build outputs, caches) stays out.
tar -C "$REPO" --exclude=./.git --exclude=./build --exclude=./bin --exclude=./.deps-ok \
    --exclude=./tools --exclude=./.cache --exclude=./.gl --exclude=./.whl --exclude=./node_modules \
    --exclude=local-runs --exclude='*.o' --exclude='*.d' --exclude=__pycache__ -cf - . |
    tar -C "$tree" -xf -
[ -z "${MAKEFILE_UNDER_TEST:-}" ] || cp "$MAKEFILE_UNDER_TEST" "$tree/Makefile"

# The targets README.md names: `make ...` code spans and lines of its code blocks that start
# with make (`make`, `CC=clang make`: the default goal, all). gpu-check is left out: its
# recipe runs sub-makes piped to tee, which -n executes.
targets=$( { grep -oE '`([A-Z]+=[^ `]* )*make( [a-z][a-z0-9_-]*)*`' "$REPO/README.md"
             grep -oE '^([A-Z]+=[^ ]* )*make( [a-z][a-z0-9_-]*)*' "$REPO/README.md"; } |
    sed -e 's/`//g' -e 's/^.*make//' | tr ' ' '\n' | grep . | sort -u | grep -vx 'gpu-check')
targets="$targets all"
for t in run test; do
    grep -qx "$t" <<<"$targets" || fail "README names make $t" "not found in README.md"
done

# First line number of make -n's output matching an extended regex, or empty.
first() { grep -nE "$1" "$2" | head -1 | cut -d: -f1; }
# The installation of DEB_PKGS (build-essential and the -dev packages), not a hook's own
# `command -v X || scripts/deps.sh X`.
DEPS_RE='(^|[;&|( ])scripts/deps\.sh .*\bbuild-essential\b'
CC_RE='^(\S*/)?(gcc|cc|clang|g\+\+|c\+\+|nvcc|ar)(-[0-9]+)? '
for t in $targets; do
    out=$tmp/$t.out
    if ! (cd "$tree" && make -n --no-print-directory "$t" >"$out" 2>&1); then
        fail "make -n $t" "$(tail -5 "$out")"
        continue
    fi
    d=$(first "$DEPS_RE" "$out"); c=$(first "$CC_RE" "$out")
    case $t in run|test)
        if [ -z "$d" ] || [ -z "$c" ]; then
            fail "make $t: installs dependencies, then compiles" "deps line ${d:-none}, first compile ${c:-none}"
            continue
        fi ;;
    esac
    if [ -n "$d" ] && [ -n "$c" ] && [ "$d" -gt "$c" ]; then
        fail "make $t: scripts/deps.sh before the first compile" \
             "deps at line $d, compile at line $c: $(sed -n "${c}p" "$out" | cut -c1-120)"
    else
        pass "make $t: scripts/deps.sh before the first compile (${d:-no deps line} / ${c:-no compile})"
    fi
done
