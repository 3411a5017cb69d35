# Shared by the CLI tests that count checks (sourced after `set -u`, with NAME set to the test's
# name): the strata binary from $1 as $STRATA, the repository root as $ROOT, a scratch directory
# $TMP removed on exit, and
#   check DESC COMMAND...   runs COMMAND; counts it passed or failed, printing $TMP/err on failure
#   run ARGS...             strata ARGS with stdout in $TMP/out, stderr in $TMP/err, status in $rc
#   finish                  prints the counts; its status is the test's (0: nothing failed)
STRATA=${1:?usage: bash tests/cli/$NAME.sh path/to/strata}
case $STRATA in /*) ;; *) STRATA=$PWD/$STRATA ;; esac
[ -x "$STRATA" ] || { echo "not executable: $STRATA" >&2; exit 2; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/strata-$NAME-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

pass=0
fail=0
check() {
    local desc=$1
    shift
    if "$@"; then
        pass=$((pass + 1))
        echo "ok   - $desc"
    else
        fail=$((fail + 1))
        echo "FAIL - $desc"
        head -c 1500 "$TMP/err" 2>/dev/null | sed 's/^/       /'
    fi
}
run() {
    "$STRATA" "$@" >"$TMP/out" 2>"$TMP/err"
    rc=$?
}
finish() {
    echo "$pass passed, $fail failed"
    [ "$fail" -eq 0 ]
}
