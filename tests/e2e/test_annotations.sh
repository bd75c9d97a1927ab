#!/usr/bin/env bash
# test_annotations.sh - results as the field's tools take them: `ecgd analyze --annotations`
# writes a WFDB annotation file that `ecgd eval --test` scores exactly as the detector itself is
# scored on a shared MIT-BIH record; the same bytes come over HTTP with Accept:
# application/x-wfdb-annotation or format=wfdb-atr. (Read back beat for beat by the project's
# reader in tests/unit/test_annotations_out.c.) Also: option values as --opt=value in every
# subcommand (getopt_long).
# Usage: ECGD=build/ecgd tests/e2e/test_annotations.sh   (run from the repository root)
set -u
ECGD=${ECGD:-build/ecgd}
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"

require_ecgd
require_data mitdb/101.hea
B=(--backend "$BACKEND")

"$ECGD" analyze "${B[@]}" "$DATA/mitdb/101" --annotations "$tmp/cli.atr" >"$tmp/cli.json"
check "ecgd analyze --annotations writes an annotation file" test -s "$tmp/cli.atr"
"$ECGD" eval "${B[@]}" --json --model none "$DATA/mitdb" 101 >"$tmp/eval_detector.json"
"$ECGD" eval --json --test "$tmp/cli.atr" "$DATA/mitdb" 101 >"$tmp/eval_file.json"
check "ecgd eval --test scores the exported file exactly as the detector (Se, +P, TP, FN, FP)" \
    python3 - "$tmp/eval_detector.json" "$tmp/eval_file.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
ta, tb = a["total"], b["total"]
keys = ["beats", "tp", "fn", "fp", "se_pct", "ppv_pct", "mean_abs_err_ms"]
print("# detector %s; file %s" % ({k: ta[k] for k in keys}, {k: tb.get(k) for k in keys}))
sys.exit(0 if keys and all(ta[k] == tb.get(k) for k in keys) else 1)
PY
check "the file counts every beat of the answer" python3 -c '
import json, sys
d = json.load(open(sys.argv[1])); n = len(d["beats"]["r_peak"])
sys.exit(0 if n > 1800 and __import__("os").path.getsize(sys.argv[2]) >= 2 * n + 2 else 1)' "$tmp/cli.json" "$tmp/cli.atr"

if start_server "$tmp/server.log" --model-dir models --model default --workers 2; then
    ok "server ready on port $PORT"
    code=$(req POST /v1/analyze -H 'Accept: application/x-wfdb-annotation' \
           -F "hea=@$DATA/mitdb/101.hea" -F "dat=@$DATA/mitdb/101.dat")
    check "Accept: application/x-wfdb-annotation: the same bytes as the CLI's file" bash -c \
        "[ $code = 200 ] && cmp -s '$tmp/body' '$tmp/cli.atr' && grep -qi '^Content-Type: application/x-wfdb-annotation' '$tmp/headers'"
    code=$(req POST '/v1/analyze?format=wfdb-atr' -F "hea=@$DATA/mitdb/101.hea" \
           -F "dat=@$DATA/mitdb/101.dat")
    check "format=wfdb-atr: the same bytes" bash -c "[ $code = 200 ] && cmp -s '$tmp/body' '$tmp/cli.atr'"
    code=$(req POST '/v1/analyze?format=json' -H 'Accept: application/x-wfdb-annotation' \
           -F "hea=@$DATA/mitdb/101.hea" -F "dat=@$DATA/mitdb/101.dat")
    check "format=json wins over Accept: the JSON answer" bash -c \
        "[ $code = 200 ] && python3 $HERE/http_helpers.py same '$tmp/body' '$tmp/cli.json'"
    code=$(req POST '/v1/analyze?format=xml' -F "hea=@$DATA/mitdb/101.hea" -F "dat=@$DATA/mitdb/101.dat")
    check "format=xml: 400 bad_format" is_error 400 bad_format
else
    not_ok "the server starts"
fi

# --opt=value everywhere (getopt_long)
"$ECGD" analyze "${B[@]}" "$DATA/ucr/ecg50T.txt" --fs 250 --include summary >"$tmp/fs_space.json"
"$ECGD" analyze "${B[@]}" "$DATA/ucr/ecg50T.txt" --fs=250 --include=summary >"$tmp/fs_equals.json"
check "ecgd analyze --fs=250 --include=summary: as --fs 250" cmp -s "$tmp/fs_space.json" "$tmp/fs_equals.json"
"$ECGD" eval "${B[@]}" --json --model=none --lead=0 "$DATA/mitdb" 101 >"$tmp/eval_equals.json"
"$ECGD" eval "${B[@]}" --json --model none --lead 0 "$DATA/mitdb" 101 >"$tmp/eval_spaces.json"
check "ecgd eval --model=none --lead=0: as --model none --lead 0" cmp -s "$tmp/eval_equals.json" "$tmp/eval_spaces.json"
"$ECGD" train "$DATA/ucr/ecg50T.txt" --fs=250 --epochs=1 --seed=3 --out="$tmp/a.ecgm" >/dev/null 2>&1
"$ECGD" train "$DATA/ucr/ecg50T.txt" --fs 250 --epochs 1 --seed 3 --out "$tmp/b.ecgm" >/dev/null 2>&1
check "ecgd train --fs=250 --epochs=1 --seed=3 --out=...: the same model as with spaces" \
    bash -c "[ -s '$tmp/a.ecgm' ] && cmp -s '$tmp/a.ecgm' '$tmp/b.ecgm'"
check "ecgd serve --port=0 --print-config" bash -c "'$ECGD' serve --port=0 --print-config | grep -q '\"port\":0'"
"$ECGD" analyze --fs 2>"$tmp/err"; rc=$?
check "a missing value: exit 2, named" bash -c "[ $rc = 2 ] && grep -q -- '--fs needs a value' '$tmp/err'"

echo "# $n tests, $failures failed"
[ "$failures" -eq 0 ]
