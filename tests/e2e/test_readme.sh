#!/usr/bin/env bash
# test_readme.sh - the README's sample answer ("## The answer") is what `ecgd analyze` prints
# today for that record on the CPU backend: model, signal and summary, and the first values of
# every beat column (floats within 2e-6 relative: the float32 VAE's SIMD paths differ in the last
# digit between CPUs); the columns listed are the columns printed.
# Usage: ECGD=build/ecgd tests/e2e/test_readme.sh   (run from the repository root)
set -u
ECGD=${ECGD:-build/ecgd}
DATA=${ECG_SHARED_DATA:-../shared/data}
if [ ! -x "$ECGD" ]; then echo "not ok 1 - $ECGD is not built"; exit 1; fi
if [ ! -f "$DATA/mitdb/101.hea" ]; then echo "skip 1 - shared data not found at $DATA"; exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$ECGD" analyze --backend cpu "$DATA/mitdb/101" >"$tmp/real.json"
python3 - README.md "$tmp/real.json" <<'PY'
import json, re, sys
readme = open(sys.argv[1]).read()
real = json.load(open(sys.argv[2]))
section = readme[readme.index("## The answer"):]
block = section[section.index("\n```\n{") + 5:]
block = block[:block.index("\n```")]
n = 0
def check(desc, cond, detail=""):
    global n
    n += 1
    print("%s %d - %s" % ("ok" if cond else "not ok", n, desc))
    if not cond and detail:
        print("# " + detail)
    return cond
def close(a, b):
    """Equal, floats within 2e-6 relative: the float32 VAE's SIMD paths (AVX-512, AVX2, the
    generic one) may differ in the 6th significant digit from one CPU to another."""
    if isinstance(a, float) or isinstance(b, float):
        return (isinstance(a, (int, float)) and isinstance(b, (int, float)) and
                abs(a - b) <= 2e-6 * max(abs(a), abs(b)) + 1e-6)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    return a == b
for key in [k for k in real if k not in ("ecgd_version", "backend", "beats", "timing_ms")]:
    m = re.search(r'^ "%s": (.*),$' % key, block, re.M)
    shown = json.loads(m.group(1)) if m else None
    check("README %s is the real one" % key, close(shown, real[key]),
          "README %s, real %s" % (shown, real[key]))
columns = re.findall(r'^   "([a-z_]+)": \[(.*), \.\.\.\]', block, re.M)
check("README beat columns are the real ones, in order", [c for c, _ in columns] == list(real["beats"]),
      "README %s, real %s" % ([c for c, _ in columns], list(real["beats"])))
for name, values in columns:
    shown = json.loads("[" + values + "]")
    check("README beats.%s starts as the real one" % name,
          name in real["beats"] and close(real["beats"][name][:len(shown)], shown),
          "README %s, real %s" % (shown, real["beats"].get(name, [])[:len(shown)]))
check("README version and backend", '"ecgd_version": "%s", "backend": "%s"' % (real["ecgd_version"], real["backend"]) in block)
check("README timing_ms keys", re.findall(r'"([a-z]+)": \.\.\.', block) == list(real["timing_ms"]))
PY
