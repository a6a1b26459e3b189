# Helpers for integration scripts: source it, then use pass/fail/check.
# HOLMES_BIN_DIR points at the binaries of the variant under test.
: "${HOLMES_BIN_DIR:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/bin}"
OPERATOR=$HOLMES_BIN_DIR/holmes-operator
NODE=$HOLMES_BIN_DIR/holmes-node
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: ${2:-}"; }
# check NAME COMMAND...: passes when the command exits 0.
check() { local n=$1; shift; if "$@"; then pass "$n"; else fail "$n" "command failed: $*"; fi; }
