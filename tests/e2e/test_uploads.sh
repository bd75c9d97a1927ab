#!/usr/bin/env bash
# test_uploads.sh - the uploads clients really send, against the real server (cpu backend by
# default), each answer compared with a plain upload or with `ecgd analyze` on the same files
# (byte-identical apart from timing_ms), each refusal with its status and code:
#   - multipart/form-data: one file (curl -F file=@rec.csv; the format from the file name, else
#     from the part's Content-Type), and a WFDB record as its .hea + .dat (formats 212 and 16,
#     excerpts of MIT-BIH 101 written here);
#   - Content-Encoding gzip, deflate (zlib and raw) and zstd, up to the body limit, which applies
#     to the decompressed size; a ~1 KB gzip bomb refused 413; corrupt, truncated, unknown codings;
#   - CSV with decimal commas ("1,25;1,30", and one number per line, "-0,145": one column, not
#     two split at the comma; "1,024" among whole numbers refused), and with a first column of
#     time or sample numbers
#     (recognised, skipped, checked against fs and reported in the answer);
#   - silent choices made loud: repeated query options, fs in the query and in a JSON body.
# Usage: ECGD=build/ecgd tests/e2e/test_uploads.sh   (run from the repository root)
set -u
ECGD=${ECGD:-build/ecgd}
HERE=$(cd "$(dirname "$0")" && pwd)
HELP="python3 $HERE/http_helpers.py"
source "$HERE/lib.sh"

require_ecgd
require_data mitdb/101.hea

# Fixtures from MIT-BIH 101: 120 s as WFDB 212 and 16, and lead MLII of the same as CSV.
python3 - "$DATA/mitdb" "$tmp" <<'PY'
import os, struct, sys
src, out = sys.argv[1], sys.argv[2]
n = 360 * 120
hea = open(os.path.join(src, "101.hea")).read().split("\n")
raw = open(os.path.join(src, "101.dat"), "rb").read(3 * n)
a, b = [], []
for i in range(0, 3 * n, 3):
    b0, b1, b2 = raw[i], raw[i + 1], raw[i + 2]
    s0 = ((b1 & 0x0F) << 8) | b0
    s1 = ((b1 & 0xF0) << 4) | b2
    a.append(s0 - 4096 if s0 > 2047 else s0)
    b.append(s1 - 4096 if s1 > 2047 else s1)
def header(name, fmt):
    lines = ["%s 2 360 %d" % (name, n)]
    for line in hea[1:3]:
        f = line.split()
        f[0], f[1] = name + ".dat", str(fmt)
        lines.append(" ".join(f))
    return "\n".join(lines) + "\n"
open(os.path.join(out, "r212.hea"), "w").write(header("r212", 212))
open(os.path.join(out, "r212.dat"), "wb").write(raw)
open(os.path.join(out, "r16.hea"), "w").write(header("r16", 16))
open(os.path.join(out, "r16.dat"), "wb").write(
    b"".join(struct.pack("<hh", x, y) for x, y in zip(a, b)))
gain, base = 200.0, 1024
with open(os.path.join(out, "rec.csv"), "w") as f:
    f.write("MLII\n")
    f.writelines("%.6g\n" % ((x - base) / gain) for x in a)# Both leads: as two columns, behind a time column, and as JSON rows of samples x leads.
mv = lambda x: "%.6g" % ((x - base) / gain)
with open(os.path.join(out, "two.csv"), "w") as f:
    f.write("MLII,V1\n")
    f.writelines("%s,%s\n" % (mv(x), mv(y)) for x, y in zip(a, b))
with open(os.path.join(out, "time2.csv"), "w") as f:
    f.write("time_s,MLII,V1\n")
    f.writelines("%.4f,%s,%s\n" % (i / 360, mv(x), mv(y)) for i, (x, y) in enumerate(zip(a, b)))
with open(os.path.join(out, "rows.json"), "w") as f:
    f.write('{"fs": 360, "leads": ["MLII", "V1"], "signal": [')
    f.write(",".join("[%s,%s]" % (mv(x), mv(y)) for x, y in zip(a, b)))
    f.write("]}")
PY

if ! start_server "$tmp/server.log" --model-dir models --model default --workers 2 \
        --max-body-mb 1; then
    echo "not ok 1 - the server starts"; sed 's/^/# /' "$tmp/server.log"; exit 1
fi
ok "server ready on port $PORT (body limit 1 MiB)"
A="/v1/analyze?include=beats,summary"

# Reference answers.
code=$(req POST "$A&fs=360" -H 'Content-Type: text/csv' --data-binary @"$tmp/rec.csv")
cp "$tmp/body" "$tmp/plain.json"
check "plain text/csv upload (the reference)" test "$code" = 200
"$ECGD" analyze --backend "$BACKEND" --model models/default.ecgm --include beats,summary \
    "$tmp/r212.hea" >"$tmp/cli212.json" 2>/dev/null
"$ECGD" analyze --backend "$BACKEND" --model models/default.ecgm --include beats,summary \
    "$tmp/r16.hea" >"$tmp/cli16.json" 2>/dev/null

# multipart/form-data
code=$(req POST "$A&fs=360" -F "file=@$tmp/rec.csv")
check "multipart, one .csv file (curl -F file=@rec.csv): same answer as text/csv" bash -c \
    "[ $code = 200 ] && $HELP same '$tmp/body' '$tmp/plain.json'"
cp "$tmp/rec.csv" "$tmp/recording"
code=$(req POST "$A&fs=360" -F "file=@$tmp/recording;type=text/csv")
check "multipart, a file without extension typed text/csv: same answer" bash -c \
    "[ $code = 200 ] && $HELP same '$tmp/body' '$tmp/plain.json'"
code=$(req POST "$A" -F "hea=@$tmp/r212.hea" -F "dat=@$tmp/r212.dat")
check "multipart WFDB .hea + .dat, format 212: same answer as ecgd analyze on the files" bash -c \
    "[ $code = 200 ] && $HELP same '$tmp/body' '$tmp/cli212.json'"
code=$(req POST "$A" -F "dat=@$tmp/r16.dat" -F "hea=@$tmp/r16.hea")
check "multipart WFDB .dat + .hea, format 16: same answer as ecgd analyze on the files" bash -c \
    "[ $code = 200 ] && $HELP same '$tmp/body' '$tmp/cli16.json'"
check "formats 212 and 16 of the same samples: same beats" python3 -c '
import json, sys
a, b = (json.load(open(p))["beats"]["r_peak"] for p in sys.argv[1:])
sys.exit(0 if a == b and len(a) > 100 else 1)' "$tmp/cli212.json" "$tmp/cli16.json"
code=$(req POST "$A&lead=V1" -F "hea=@$tmp/r212.hea" -F "dat=@$tmp/r212.dat")
check "multipart WFDB with lead=V1: the second signal" bash -c \
    "[ $code = 200 ] && grep -q '\"lead\":\"V1\"' '$tmp/body'"
"$ECGD" analyze --backend "$BACKEND" --model models/default.ecgm --include beats,summary \
    --lead all "$tmp/r212.hea" >"$tmp/cli212all.json" 2>/dev/null
code=$(req POST "$A&lead=all" -F "hea=@$tmp/r212.hea" -F "dat=@$tmp/r212.dat")
check "multipart WFDB with lead=all: both signals, same answer as ecgd analyze --lead all" bash -c \
    "[ $code = 200 ] && $HELP same '$tmp/body' '$tmp/cli212all.json' && grep -q '\"leads\":\[\"MLII\",\"V1\"\]' '$tmp/body'"
code=$(req POST "$A&lead=V1,MLII" -F "hea=@$tmp/r16.hea" -F "dat=@$tmp/r16.dat")
check "multipart WFDB (16) with lead=V1,MLII: the beat table reads V1, detection both" bash -c \
    "[ $code = 200 ] && grep -q '\"lead\":\"V1\",\"leads\":\[\"V1\",\"MLII\"\]' '$tmp/body'"
code=$(req POST "/v1/analyses?include=beats,summary&lead=all" -F "hea=@$tmp/r212.hea" \
       -F "dat=@$tmp/r212.dat")
check "POST /v1/analyses with a WFDB form and lead=all: 201, the beats of ecgd analyze" python3 -c '
import json, sys
a, b = json.load(open(sys.argv[2])), json.load(open(sys.argv[3]))
sys.exit(0 if sys.argv[1] == "201" and a["beats"]["r_peak"] == b["beats"]["r_peak"]
         and a["signal"]["leads"] == ["MLII", "V1"] else 1)' "$code" "$tmp/body" "$tmp/cli212all.json"
code=$(req POST "$A&fs=250" -F "hea=@$tmp/r212.hea" -F "dat=@$tmp/r212.dat")
check "multipart WFDB with fs=250 (the header says 360): 400 conflicting_fs" is_error 400 conflicting_fs
code=$(req POST "$A" -F "dat=@$tmp/r212.dat")
check "multipart, a .dat alone: 400 bad_multipart" is_error 400 bad_multipart
code=$(req POST "$A" -F "hea=@$tmp/r212.hea" -F "dat=@$tmp/r16.dat")
check "multipart, a .dat the header does not name: 400 bad_wfdb" is_error 400 bad_wfdb
code=$(req POST "$A&fs=360" -F "file=@$tmp/rec.csv" -F "fs=360")
check "multipart, a plain form field: 400 bad_multipart (options go in the query)" is_error 400 bad_multipart
code=$(req POST "$A&fs=360" -F "a=@$tmp/rec.csv" -F "b=@$tmp/rec.csv" -F "c=@$tmp/rec.csv")
check "multipart, three files: 400 bad_multipart" is_error 400 bad_multipart
code=$(req POST "$A&fs=360" -F "file=@$tmp/recording;type=image/png")
check "multipart, a file of unknown name and type: 415 unsupported_media_type" is_error 415 unsupported_media_type
code=$(req POST "$A&fs=360" -H 'Content-Type: multipart/form-data; boundary=xyz' \
       --data-binary $'--xyz\r\nContent-Disposition: form-data; name="file"; filename="a.csv"\r\n\r\n1\n2\n')
check "multipart without its closing boundary: 400 bad_multipart" is_error 400 bad_multipart
code=$(req POST "$A&fs=360" -H 'Content-Type: multipart/form-data' --data-binary 'x')
check "multipart without a boundary: 400 bad_multipart" is_error 400 bad_multipart

# Content-Encoding
gzip -c "$tmp/rec.csv" >"$tmp/rec.csv.gz"
python3 -c 'import sys, zlib; d = open(sys.argv[1], "rb").read()
open(sys.argv[1] + ".zlib", "wb").write(zlib.compress(d))
c = zlib.compressobj(9, zlib.DEFLATED, -15); open(sys.argv[1] + ".raw", "wb").write(c.compress(d) + c.flush())' "$tmp/rec.csv"
for coding in gzip:gz deflate:zlib deflate:raw; do
    name=${coding%%:*} ext=${coding##*:}
    code=$(req POST "$A&fs=360" -H 'Content-Type: text/csv' -H "Content-Encoding: $name" \
           --data-binary @"$tmp/rec.csv.$ext")
    check "Content-Encoding: $name ($ext): same answer as the plain body" bash -c \
        "[ $code = 200 ] && $HELP same '$tmp/body' '$tmp/plain.json'"
done
if command -v zstd >/dev/null; then
    zstd -q -c "$tmp/rec.csv" >"$tmp/rec.csv.zst"
    code=$(req POST "$A&fs=360" -H 'Content-Type: text/csv' -H 'Content-Encoding: zstd' \
           --data-binary @"$tmp/rec.csv.zst")
    check "Content-Encoding: zstd: same answer as the plain body" bash -c \
        "[ $code = 200 ] && $HELP same '$tmp/body' '$tmp/plain.json'"
else
    not_ok "Content-Encoding: zstd (the zstd command is missing: apt-get install zstd)"
fi
python3 -c 'import gzip, sys
d = open(sys.argv[1], "rb").read()
body = (b"--b0undary\r\nContent-Disposition: form-data; name=\"file\"; filename=\"rec.csv\"\r\n"
        b"Content-Type: text/csv\r\n\r\n" + d + b"\r\n--b0undary--\r\n")
open(sys.argv[2], "wb").write(gzip.compress(body))' "$tmp/rec.csv" "$tmp/form.gz"
code=$(req POST "$A&fs=360" -H 'Content-Type: multipart/form-data; boundary=b0undary' \
       -H 'Content-Encoding: gzip' --data-binary @"$tmp/form.gz")
check "multipart inside gzip: same answer as the plain body" bash -c \
    "[ $code = 200 ] && $HELP same '$tmp/body' '$tmp/plain.json'"
# Up to the limit: 1 MiB of CSV decompressed passes, one byte more is refused.
python3 -c 'import sys
lines = open(sys.argv[1]).read().split("\n")[1:]
out = ""
i = 0
while len(out) < (1 << 20) - 16:
    out += lines[i % len(lines)] + "\n"; i += 1
out = out[:(1 << 20) - 1]; out = out[:out.rindex("\n") + 1]
out += "0" * ((1 << 20) - len(out))
open(sys.argv[2], "w").write(out)
open(sys.argv[3], "w").write(out + "\n")' "$tmp/rec.csv" "$tmp/limit.csv" "$tmp/over.csv"
gzip -c "$tmp/limit.csv" >"$tmp/limit.csv.gz"
gzip -c "$tmp/over.csv" >"$tmp/over.csv.gz"
code=$(req POST "$A&fs=360" -H 'Content-Type: text/csv' -H 'Content-Encoding: gzip' \
       --data-binary @"$tmp/limit.csv.gz")
check "gzip body of exactly the limit once decompressed (1 MiB): 200" test "$code" = 200
code=$(req POST "$A&fs=360" -H 'Content-Type: text/csv' -H 'Content-Encoding: gzip' \
       --data-binary @"$tmp/over.csv.gz")
check "gzip body one byte over the limit once decompressed: 413 body_too_large" is_error 413 body_too_large
head -c 1200000 /dev/zero | gzip -9 >"$tmp/bomb.gz"
bomb_size=$(stat -c %s "$tmp/bomb.gz")
code=$(req POST "$A&fs=360" -H 'Content-Type: text/csv' -H 'Content-Encoding: gzip' \
       --data-binary @"$tmp/bomb.gz")
check "a $bomb_size-byte gzip bomb (1.2 MB of zeros): 413 body_too_large" is_error 413 body_too_large
check "the bomb is about 1 KB" test "$bomb_size" -lt 1400
code=$(req POST "$A&fs=360" -H 'Content-Type: text/csv' -H 'Content-Encoding: gzip' \
       --data-binary @"$tmp/rec.csv")
check "Content-Encoding: gzip on a plain body: 400 bad_encoding" is_error 400 bad_encoding
head -c 2000 "$tmp/rec.csv.gz" >"$tmp/cut.gz"
code=$(req POST "$A&fs=360" -H 'Content-Type: text/csv' -H 'Content-Encoding: gzip' \
       --data-binary @"$tmp/cut.gz")
check "a truncated gzip body: 400 bad_encoding" is_error 400 bad_encoding
code=$(req POST "$A&fs=360" -H 'Content-Type: text/csv' -H 'Content-Encoding: br' \
       --data-binary @"$tmp/rec.csv")
check "Content-Encoding: br: 415 unsupported_encoding" is_error 415 unsupported_encoding

# Silent choices made loud
code=$(req POST "$A&fs=360&fs=250" -H 'Content-Type: text/csv' --data-binary @"$tmp/rec.csv")
check "fs=360&fs=250: 400 repeated_parameter" is_error 400 repeated_parameter
code=$(req POST "$A&fs=360&lead=0&lead=1" -H 'Content-Type: text/csv' --data-binary @"$tmp/rec.csv")
check "lead given twice: 400 repeated_parameter" is_error 400 repeated_parameter
python3 -c 'import json, sys
v = [float(l) for l in open(sys.argv[1]).read().split("\n")[1:] if l]
json.dump({"fs": 360, "signal": v}, open(sys.argv[2], "w"))' "$tmp/rec.csv" "$tmp/rec.json"
code=$(req POST "$A&fs=250" -H 'Content-Type: application/json' --data-binary @"$tmp/rec.json")
check "fs=250 in the query, \"fs\": 360 in the JSON body: 400 conflicting_fs" is_error 400 conflicting_fs
code=$(req POST "$A&fs=360" -H 'Content-Type: application/json' --data-binary @"$tmp/rec.json")
check "the same fs in the query and the JSON body: 200" test "$code" = 200

# CSV with decimal commas and ';' between columns (European spreadsheet exports)
python3 -c 'import sys
rows = open(sys.argv[1]).read().split("\n")[1:]
with open(sys.argv[2], "w") as f:
    f.write("MLII;Resp\n")
    f.writelines("%s;1,5\n" % r.replace(".", ",") for r in rows if r)' "$tmp/rec.csv" "$tmp/comma.csv"
# marked_answer CODE PLAIN: the last answer is a 200 that says "decimal_mark": "," and is
# PLAIN's answer otherwise
marked_answer() {
    [ "$1" = 200 ] && grep -q '"decimal_mark":","' "$tmp/body" &&
        sed 's/,"decimal_mark":","//' "$tmp/body" >"$tmp/body.unmarked" &&
        $HELP same "$tmp/body.unmarked" "$2"
}
code=$(req POST "$A&fs=360" -H 'Content-Type: text/csv' --data-binary @"$tmp/comma.csv")
check "CSV with decimal commas (\"-0,125;1,5\"): the plain CSV's answer, decimal_mark said" \
    marked_answer "$code" "$tmp/plain.json"
# One number per line with decimal commas, as such a spreadsheet saves one column: one column,
# not two split at the comma; with a header (no ',' in it) and without.
python3 -c 'import sys
rows = [r for r in open(sys.argv[1]).read().split("\n")[1:] if r]
open(sys.argv[2], "w").write("MLII\n" + "".join(r.replace(".", ",") + "\n" for r in rows))
open(sys.argv[3], "w").write("".join(r + "\n" for r in rows))
open(sys.argv[4], "w").write("".join(r.replace(".", ",") + "\r\n" for r in rows))' \
    "$tmp/rec.csv" "$tmp/onecomma.csv" "$tmp/nohead.csv" "$tmp/nohead_comma.csv"
code=$(req POST "$A&fs=360" -H 'Content-Type: text/csv' --data-binary @"$tmp/onecomma.csv")
check "one column \"MLII\" of \"-0,145\" lines: the plain CSV's answer, decimal_mark said" \
    marked_answer "$code" "$tmp/plain.json"
code=$(req POST "$A&fs=360" -H 'Content-Type: text/csv' --data-binary @"$tmp/nohead.csv")
cp "$tmp/body" "$tmp/nohead.json"
code=$(req POST "$A&fs=360" -H 'Content-Type: text/csv' --data-binary @"$tmp/nohead_comma.csv")
check "\"-0,145\" lines, no header, CRLF: one column, not two split at the comma" \
    marked_answer "$code" "$tmp/nohead.json"
# ... and tab-separated with decimal commas, as such a spreadsheet's "text (tab-delimited)"
python3 -c 'import sys
rows = [r for r in open(sys.argv[1]).read().split("\n")[1:] if r]
open(sys.argv[2], "w").write("MLII\tResp\n" + "".join(r.replace(".", ",") + "\t1,5\n" for r in rows))' \
    "$tmp/rec.csv" "$tmp/tabcomma.csv"
code=$(req POST "$A&fs=360" -H 'Content-Type: text/csv' --data-binary @"$tmp/tabcomma.csv")
check "tab-separated \"-0,145<TAB>1,5\": the plain CSV's answer, decimal_mark said" \
    marked_answer "$code" "$tmp/plain.json"
code=$(req POST "$A&fs=360" -H 'Content-Type: text/csv' --data-binary $'512\n1,024\n998\n1,000\n')
check "whole numbers and \"1,024\": a thousands separator or a decimal mark: 400 ambiguous_csv" \
    is_error 400 ambiguous_csv
code=$(req POST "$A&fs=360" -H 'Content-Type: text/csv' --data-binary $'1.234,5;2\n1;2\n')
check "a ';' CSV field with both '.' and ',': 400 bad_csv (not guessed)" is_error 400 bad_csv

# A first column of time is recognised, skipped, checked against fs and reported.
python3 -c 'import sys
rows = [r for r in open(sys.argv[1]).read().split("\n")[1:] if r]
def write(name, head, fmt):
    with open(name, "w") as f:
        if head:
            f.write(head + "\n")
        f.writelines(fmt(i) + "," + r + "\n" for i, r in enumerate(rows))
d = sys.argv[2]
write(d + "/time_s.csv", "time_s,MLII", lambda i: "%.3f" % (i / 360))
write(d + "/time_ms.csv", "Time (ms),MLII", lambda i: "%.1f" % (i * 1000 / 360))
write(d + "/time_nohead.csv", "", lambda i: "%.4f" % (i / 360))
write(d + "/sample.csv", "sample,MLII", lambda i: "%d" % i)
write(d + "/time_bad.csv", "time,MLII", lambda i: "%.3f" % ((i if i != 5000 else 10) / 360))
' "$tmp/rec.csv" "$tmp"
# signal_is FILE FS TIME_COLUMN FS_FROM: an answer whose beats are the plain CSV's, with that
# signal description
signal_is() {
    python3 - "$1" "$tmp/plain.json" "$2" "$3" "$4" <<'PY'
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
s = a["signal"]
good = (a["beats"]["r_peak"] == b["beats"]["r_peak"] and s["fs_hz"] == float(sys.argv[3])
        and s["lead"] == ("" if sys.argv[4] == "column 1" else "MLII")
        and s.get("time_column") == sys.argv[4]
        and s.get("fs_from") == sys.argv[5])
if not good:
    print("# signal %s, %d beats (plain: %d)" % (s, len(a["beats"]["r_peak"]), len(b["beats"]["r_peak"])))
sys.exit(0 if good else 1)
PY
}
# answer_signal CODE FS TIME_COLUMN FS_FROM: a 200 answer ($tmp/body) as signal_is wants it
answer_signal() { [ "$1" = 200 ] && signal_is "$tmp/body" "$2" "$3" "$4"; }
code=$(req POST "$A" -H 'Content-Type: text/csv' --data-binary @"$tmp/time_s.csv")
check "CSV \"time_s,MLII\" without fs: time skipped, fs 360 from it, reported" answer_signal "$code" 360 time_s time_column
code=$(req POST "$A" -H 'Content-Type: text/csv' --data-binary @"$tmp/time_ms.csv")
check "CSV \"Time (ms),MLII\": milliseconds, fs 360 from it" answer_signal "$code" 360 'Time (ms)' time_column
code=$(req POST "$A" -H 'Content-Type: text/csv' --data-binary @"$tmp/time_nohead.csv")
check "CSV without header whose first column rises steadily: time, reported as column 1" answer_signal "$code" 360 'column 1' time_column
code=$(req POST "$A&fs=360" -H 'Content-Type: text/csv' --data-binary @"$tmp/time_s.csv")
check "CSV with time and fs=360: fs agrees, reported as given" answer_signal "$code" 360 time_s fs
code=$(req POST "$A&fs=250" -H 'Content-Type: text/csv' --data-binary @"$tmp/time_s.csv")
check "CSV with time (360 Hz) and fs=250: 400 conflicting_fs" is_error 400 conflicting_fs
code=$(req POST "$A" -H 'Content-Type: text/csv' --data-binary @"$tmp/time_bad.csv")
check "CSV \"time\" column that goes back at one row: 400 bad_csv" is_error 400 bad_csv
code=$(req POST "$A" -H 'Content-Type: text/csv' --data-binary @"$tmp/sample.csv")
check "CSV \"sample,MLII\" without fs: skipped, but no rate: 400 fs_required" is_error 400 fs_required
code=$(req POST "$A&fs=360" -H 'Content-Type: text/csv' --data-binary @"$tmp/sample.csv")
check "CSV \"sample,MLII\" with fs=360: index skipped, reported" answer_signal "$code" 360 sample fs

# Several leads: JSON rows of samples x leads, a time column with lead lists.
code=$(req POST "$A&fs=360&lead=all" -H 'Content-Type: text/csv' --data-binary @"$tmp/two.csv")
cp "$tmp/body" "$tmp/two.json"
check "two-column CSV with lead=all (the reference for several leads)" test "$code" = 200
code=$(req POST "$A&lead=all" -H 'Content-Type: application/json' --data-binary @"$tmp/rows.json")
check "JSON signal as rows of samples x leads, lead=all: same answer as the CSV" bash -c \
    "[ $code = 200 ] && $HELP same '$tmp/body' '$tmp/two.json'"
code=$(req POST "$A&lead=V1" -H 'Content-Type: application/json' --data-binary @"$tmp/rows.json")
check "JSON rows with lead=V1: that column" bash -c \
    "[ $code = 200 ] && grep -q '\"lead\":\"V1\"' '$tmp/body'"
# leads_are CODE TIME_COLUMN FS_FROM: the two-lead answer, with that time column report
leads_are() {
    [ "$1" = 200 ] && python3 - "$tmp/body" "$tmp/two.json" "$2" "$3" <<'PY'
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
s = a["signal"]
good = (a["beats"]["r_peak"] == b["beats"]["r_peak"] and s["leads"] == ["MLII", "V1"]
        and s["fs_hz"] == 360 and s.get("time_column") == sys.argv[3]
        and s.get("fs_from") == sys.argv[4])
if not good:
    print("# signal %s" % s)
sys.exit(0 if good else 1)
PY
}
code=$(req POST "$A&lead=all" -H 'Content-Type: text/csv' --data-binary @"$tmp/time2.csv")
check "CSV \"time_s,MLII,V1\" with lead=all, no fs: time is no lead, fs from it" leads_are "$code" time_s time_column
code=$(req POST "$A&lead=MLII,V1" -H 'Content-Type: text/csv' --data-binary @"$tmp/time2.csv")
check "CSV with time and lead=MLII,V1, no fs: fs from the time column" leads_are "$code" time_s time_column
code=$(req POST "$A&lead=all&fs=360" -H 'Content-Type: text/csv' --data-binary @"$tmp/time2.csv")
check "CSV with time, lead=all and fs=360: fs agrees, reported as given" leads_are "$code" time_s fs
code=$(req POST "$A&lead=all&fs=250" -H 'Content-Type: text/csv' --data-binary @"$tmp/time2.csv")
check "CSV with time (360 Hz), lead=all and fs=250: 400 conflicting_fs" is_error 400 conflicting_fs

# The decompressed size counts against the memory budget, not only the body limit: a 40 MB
# budget takes this small gzip body at admission (reckoned 10-fold), then refuses what it
# really decompresses to (8 MiB of CSV, about 80 MB to analyse) as larger than the budget.
kill -TERM "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null
if start_server "$tmp/server2.log" --model-dir models --model default --workers 1 \
        --max-body-mb 8 --memory-budget-mb 40 --async-mb 1; then
    python3 -c 'import sys; open(sys.argv[1], "w").write("0.125\n" * (8 * 1048576 // 6))' "$tmp/big.csv"
    gzip -c "$tmp/big.csv" >"$tmp/big.csv.gz"
    code=$(req POST "$A&fs=360" -H 'Content-Type: text/csv' -H 'Content-Encoding: gzip' \
           --data-binary @"$tmp/big.csv.gz")
    check "a $(stat -c %s "$tmp/big.csv.gz")-byte gzip body of 8 MiB of CSV under a 40 MB budget: 413 body_too_large" \
        is_error 413 body_too_large
    check "... the message names the decompressed size and the budget" \
        grep -q 'decompresses to 8388606 bytes.*memory budget' "$tmp/body"
    code=$(req POST "$A&fs=360" -H 'Content-Type: text/csv' -H 'Content-Encoding: gzip' \
           --data-binary @"$tmp/rec.csv.gz")
    check "the same server analyses a gzip body that fits: 200" test "$code" = 200
    # A form is split with its connection's headers: even with Prefer: respond-async past
    # --async-mb it is analysed while the connection lasts (201), where a plain body gets 202.
    code=$(req POST "/v1/analyses?fs=360&include=summary" -H 'Prefer: respond-async' \
           -F "file=@$tmp/limit.csv")
    check "POST /v1/analyses, a 1 MiB form with Prefer: respond-async: 201, answered at once" \
        test "$code" = 201
    code=$(req POST "/v1/analyses?fs=360&include=summary" -H 'Prefer: respond-async' \
           -H 'Content-Type: text/csv' --data-binary @"$tmp/limit.csv")
    check "... the same 1 MiB as a plain body: 202 (asynchronous)" test "$code" = 202
else
    not_ok "the server starts with --memory-budget-mb 40"; sed 's/^/# /' "$tmp/server2.log"
fi

echo "# $n tests, $failures failed"
[ "$failures" -eq 0 ]
