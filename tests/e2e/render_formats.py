#!/usr/bin/python3
"""Renders one lead of a CSV fixture as float32, .npy, JSON and EDF files, for the CLI test that
checks every reader gives the same beats.

usage: render_formats.py CSV FS OUTDIR

The EDF file is written by hand (EDF is a fixed 256-byte-per-record header format) with a
physical scale of exactly 1/200 mV per digital unit, the MIT-BIH ADC's own resolution, so the
samples round-trip without loss.
"""
import json
import sys

import numpy as np

csv_path, fs, outdir = sys.argv[1], float(sys.argv[2]), sys.argv[3]
x = np.loadtxt(csv_path, delimiter=",", skiprows=1, usecols=0).astype(np.float32)

x.astype("<f4").tofile(f"{outdir}/rec.f32")
np.save(f"{outdir}/rec.npy", x.astype(np.float64))
with open(f"{outdir}/rec.json", "w") as f:
    json.dump({"fs": fs, "lead": "MLII", "signal": [float(v) for v in x]}, f)

# EDF: one signal, 1-second data records.
per_rec = int(fs)
n_rec = len(x) // per_rec
digital = np.round(x[: n_rec * per_rec].astype(np.float64) * 200).astype("<i2")


def field(value, width):
    s = str(value)
    assert len(s) <= width, (s, width)
    return s.ljust(width).encode("ascii")


hdr = b"".join([
    field(0, 8), field("X X X X", 80), field("Startdate X X X X", 80),
    field("01.01.00", 8), field("00.00.00", 8), field(512, 8), field("", 44),
    field(n_rec, 8), field(1, 8), field(1, 4),
    field("MLII", 16), field("", 80), field("mV", 8),
    field("-163.84", 8), field("163.835", 8), field(-32768, 8), field(32767, 8),
    field("", 80), field(per_rec, 8), field("", 32),
])
with open(f"{outdir}/rec.edf", "wb") as f:
    f.write(hdr)
    f.write(digital.tobytes())
