# Helpers of the training CLI tests (sourced): a reference run's losses in $W/ref.jsonl.
# losses FILE: "step loss" lines of a metrics file.
losses() { sed -E 's/^\{"step":([0-9]+),"loss":([-0-9.e]+).*/\1 \2/' "$1"; }
# same_losses NAME FILE FIRST LAST: every step FIRST..LAST of FILE within 1e-4 of $W/ref.jsonl;
# prints NAME ok/FAIL, sets fail=1 on a difference.
same_losses() {
    awk -v name="$1" -v first="$3" -v last="$4" '
        NR == FNR { ref[$1] = $2; next }
        $1 >= first && $1 <= last { n++; d = $2 - ref[$1]; if (d < 0) d = -d
            if (d > 1e-4) { bad = 1; printf "  step %d: %s vs %s\n", $1, $2, ref[$1] } }
        END { if (n != last - first + 1) { printf "  %d steps, want %d\n", n, last - first + 1; bad = 1 }
              printf "%-40s %s\n", name, bad ? "FAIL" : "ok"; exit bad }' \
        <(losses "$W/ref.jsonl") <(losses "$2") || fail=1
}
# expect_error NAME PATTERN COMMAND...: COMMAND exits non-zero with PATTERN in its output.
expect_error() {
    local name=$1 pat=$2; shift 2
    if "$@" >"$W/err.log" 2>&1; then echo "$name: FAIL (exit 0)"; fail=1
    elif ! grep -q -- "$pat" "$W/err.log"; then echo "$name: FAIL (no '$pat')"; cat "$W/err.log"; fail=1
    else echo "$name: ok"; fi
}
