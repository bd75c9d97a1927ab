#!/usr/bin/env bash
# End-to-end tests of `ecgd train`: bad usage exits 2 with a message; training on one
# unannotated recording and on two annotated records writes a model that loads, is deterministic
# for a seed, and scores beats through `ecgd analyze`.
# Prints TAP-style "ok N - ..." / "not ok N - ..." lines.
set -u
ECGD=${ECGD:-build/ecgd}
PY=/usr/bin/python3
shared=../shared/data
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0 failed=0

check() { # check DESCRIPTION COMMAND...
    local desc=$1; shift
    n=$((n + 1))
    if "$@" >"$tmp/out" 2>"$tmp/err"; then
        echo "ok $n - $desc"
    else
        echo "not ok $n - $desc"; sed 's/^/#   /' "$tmp/err" | head -5; failed=$((failed + 1))
    fi
}

exits() { # exits CODE PATTERN COMMAND...: exit status CODE and PATTERN on stderr
    local code=$1 pattern=$2; shift 2
    "$@" >/dev/null 2>"$tmp/usage"
    local rc=$?
    [ "$rc" -eq "$code" ] && grep -q -- "$pattern" "$tmp/usage" ||
        { echo "exit $rc, stderr: $(head -2 "$tmp/usage")" >&2; return 1; }
}

check "no arguments: usage, exit 2" exits 2 "give either --db DIR or one FILE" "$ECGD" train
check "--epochs 0 refused" exits 2 "--epochs expects a count" \
    "$ECGD" train --db "$shared/mitdb" --epochs 0 --out "$tmp/x.ecgm"
check "bad --enc refused" exits 2 "three widths" \
    "$ECGD" train --db "$shared/mitdb" --enc 4,8 --out "$tmp/x.ecgm"
check "missing --out refused" exits 2 "--out PATH is required" "$ECGD" train --db "$shared/mitdb"
check "missing record: exit 1 naming it" exits 1 "999" \
    "$ECGD" train --db "$shared/mitdb" 999 --out "$tmp/x.ecgm"
check "no model file left behind by a failure" test ! -e "$tmp/x.ecgm"

# one unannotated recording (200 s at 250 Hz), all beats
"$ECGD" train "$shared/ucr/ecg50T.txt" --fs 250 --epochs 3 --seed 5 --out "$tmp/ucr.ecgm" \
    >"$tmp/ucr.out" 2>"$tmp/ucr.err"
check "train on one recording" test -s "$tmp/ucr.ecgm"
check "progress on stderr" grep -q "epoch 3/3  loss" "$tmp/ucr.err"
check "summary on stdout" grep -q "threshold .* at the 99 percentile" "$tmp/ucr.out"

# two annotated records, normal-class beats, twice with the same seed: identical files
for k in 1 2; do
    "$ECGD" train --db "$shared/mitdb" 101 116 --epochs 2 --seed 9 --out "$tmp/m$k.ecgm" \
        >"$tmp/train$k.out" 2>/dev/null
done
check "annotated records: model written" test -s "$tmp/m1.ecgm"
check "same seed, byte-identical model" cmp "$tmp/m1.ecgm" "$tmp/m2.ecgm"
check "summary names normal-class beats" grep -q "normal-class beats" "$tmp/train1.out"

# the model scores beats through analyze
"$ECGD" analyze "$shared/mitdb/208" --format wfdb --model "$tmp/m1.ecgm" >"$tmp/a.json" 2>"$tmp/a.err"
check "analyze with the trained model gives scores" $PY -c '
import json, math, sys
doc = json.load(open(sys.argv[1]))
def find(d, key):
    if isinstance(d, dict):
        if key in d:
            return d[key]
        for v in d.values():
            r = find(v, key)
            if r is not None:
                return r
    return None
score = find(doc, "score")
outlier = find(doc, "outlier")
assert score and len(score) > 2000, "no scores"
flagged = sum(1 for o in outlier if o)
assert 100 < flagged < len(score) / 2, flagged
' "$tmp/a.json"

echo "# $n tests, $failed failed"
[ "$failed" -eq 0 ]
