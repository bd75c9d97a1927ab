"""Helpers of tests/e2e/test_analyses.sh and tests/e2e/test_browser.sh: recordings written from
the shared MIT-BIH data, and independent checks of /v1/analyses answers (a min/max reduction
computed here from the recording itself, beats compared with the CLI's answer).

Usage: python3 analyses_helpers.py COMMAND ARGS...  (exit status 0 = check passed)
"""
import json
import math
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from http_helpers import read_mit212  # noqa: E402


def mitcsv(data_dir, record, out, seconds="0"):
    """Lead 0 (MLII) of a record as a one-column CSV in mV (seconds 0 = the whole record)."""
    n = int(float(seconds) * 360) if float(seconds) > 0 else 10 ** 9
    fs, digital, gains, bases, names = read_mit212(data_dir, record, n)
    with open(out, "w") as f:
        f.write(names[0] + "\n")
        f.write("\n".join("%.3f" % ((a - bases[0]) / gains[0]) for a in digital[0]) + "\n")


def long_f32(data_dir, out, hours):
    """A long float32 recording at 360 Hz: the 30-minute records of the shared data repeated."""
    samples = []
    need = int(float(hours) * 3600 * 360)
    for record in ("101", "106", "108", "109", "112", "114", "115", "116", "118"):
        if len(samples) >= need:
            break
        fs, digital, gains, bases, names = read_mit212(data_dir, record, 10 ** 9)
        samples.extend((a - bases[0]) / gains[0] for a in digital[0])
    with open(out, "wb") as f:
        written = 0
        while written < need:
            part = samples[:need - written]
            f.write(struct.pack("<%df" % len(part), *part))
            written += len(part)


def read_csv_column(path):
    with open(path) as f:
        lines = f.read().split("\n")
    values = []
    for line in lines[1:]:
        if line.strip():
            values.append(struct.unpack("<f", struct.pack("<f", float(line.split(",")[0])))[0])
    return values


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def minmax(csv_path, window_path, start_s, end_s, points):
    """The window answer equals a min/max reduction of the CSV computed here."""
    x = read_csv_column(csv_path)
    w = json.load(open(window_path))
    fs = w["fs_hz"]
    start = int(float(start_s) * fs) if start_s != "-" else 0
    end = min(len(x), math.ceil(float(end_s) * fs)) if end_s != "-" else len(x)
    assert (w["start"], w["end"]) == (start, end), ("window", w["start"], w["end"], start, end)
    n = end - start
    points = int(points)
    if n <= points:
        assert not w["decimated"] and w["i"] == list(range(start, end)), "raw window"
        assert all(f32(a) == f32(b) for a, b in zip(w["v"], x[start:end])), "raw values"
        return 0
    buckets = points // 2
    i_exp, v_exp = [], []
    for b in range(buckets):
        lo, hi = start + n * b // buckets, start + n * (b + 1) // buckets
        seg = x[lo:hi]
        i_min = lo + seg.index(min(seg))
        i_max = lo + seg.index(max(seg))
        for i in sorted({i_min, i_max}):
            i_exp.append(i)
            v_exp.append(x[i])
    assert w["decimated"] and w["buckets"] == buckets, ("buckets", w["buckets"], buckets)
    assert w["i"] == i_exp, "indices differ"
    assert all(f32(a) == f32(b) for a, b in zip(w["v"], v_exp)) and len(w["v"]) == len(v_exp)
    return 0


def beat(beat_path, cli_path, decode_path, k):
    """GET .../beats/{k} agrees with the CLI's answer (beat table, latent, score) and its
    reconstruction with the decoder of POST /v1/models/{name}/decode at the same latent point."""
    b = json.load(open(beat_path))
    cli = json.load(open(cli_path))["beats"]
    k = int(k)
    assert b["beat"] == k
    for key in ("r_peak", "end"):
        assert b[key] == cli[key][k], key
    assert b["onset"] == max(0, cli["onset"][k])
    assert b["kept"] == cli["kept"][k]
    assert len(b["samples"]) == b["end"] - b["onset"]
    assert abs(b["score"] - cli["score"][k]) <= 1e-4 * max(1.0, abs(cli["score"][k])), "score"
    assert all(abs(a - c) <= 1e-5 for a, c in zip(b["latent"], cli["latent"][k])), "latent"
    dec = json.load(open(decode_path))
    assert len(b["reconstruction"]) == b["beat_len"] == len(dec["beats"][0])
    assert all(abs(a - c) <= 1e-5 * max(1, abs(c)) for a, c in zip(b["reconstruction"], dec["beats"][0]))
    assert len(b["embedded"]) == b["beat_len"]
    return 0


def metric(metrics_path, name):
    for line in open(metrics_path):
        if line.startswith(name + " "):
            print(line.split()[1])
            return 0
    return 1


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    try:
        rc = {"mitcsv": mitcsv, "long_f32": long_f32, "minmax": minmax, "beat": beat,
              "metric": metric}[cmd](*args) or 0
    except AssertionError as e:
        print("# check failed: %s" % (e,))
        rc = 1
    sys.exit(rc)
