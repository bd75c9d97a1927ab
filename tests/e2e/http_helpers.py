#!/usr/bin/env python3
"""Helpers for tests/e2e/test_http.sh and bench/bench_http.sh (python3 standard library only).

  fixtures DATA_DIR OUT_DIR      write the test recordings (real data) in every format
  same A B                       exit 0 when two analysis answers are byte-identical apart
                                 from "timing_ms"; else print the first difference
  error FILE STATUS CODE         exit 0 when FILE is {"error": {"status", "code", "message"}}
                                 with that status and code
  openapi DOC ROUTES             exit 0 when the OpenAPI document and `ecgd serve --list-routes`
                                 name the same operations
  slowloris PORT TIMEOUT_S       open a connection, send half a request, and exit 0 when the
                                 server closes it within TIMEOUT_S + 10 seconds
  bigcsv OUT N                   write an N-sample CSV (the UCR excerpt repeated) for benchmarks
  sink PORT_FILE                 a trivial HTTP sink on 127.0.0.1: reads each request body
                                 (Content-Length or chunked), discards it, answers 200; writes
                                 its port to PORT_FILE; runs until killed
"""
import json
import os
import re
import socket
import struct
import sys
import time

TIMING = re.compile(rb',"timing_ms":\{[^}]*\}')


def read_ucr(data_dir):
    with open(os.path.join(data_dir, "ucr", "ecg50T.txt")) as f:
        return [float(line) for line in f if line.strip()]


def read_mit212(data_dir, record, n):
    """First n samples of both leads of an MIT-BIH record (format 212), as digital values and
    the header's gains/baselines/names."""
    hea = open(os.path.join(data_dir, "mitdb", record + ".hea")).read().split("\n")
    fs = float(hea[0].split()[2])
    gains, bases, names = [], [], []
    for line in hea[1:3]:
        parts = line.split()
        gains.append(float(parts[2].split("(")[0].split("/")[0]))
        bases.append(int(parts[4]))
        names.append(parts[8] if len(parts) > 8 else "lead%d" % len(names))
    raw = open(os.path.join(data_dir, "mitdb", record + ".dat"), "rb").read(3 * n)
    a, b = [], []
    for i in range(0, len(raw) - 2, 3):
        b0, b1, b2 = raw[i], raw[i + 1], raw[i + 2]
        s0 = ((b1 & 0x0F) << 8) | b0
        s1 = ((b1 & 0xF0) << 4) | b2
        a.append(s0 - 4096 if s0 > 2047 else s0)
        b.append(s1 - 4096 if s1 > 2047 else s1)
    return fs, [a[:n], b[:n]], gains, bases, names


def write_edf(path, fs, digital, gains, bases, names):
    ns = len(digital)
    per_record = int(fs)
    n_records = len(digital[0]) // per_record
    def field(text, width):
        return text[:width].ljust(width).encode("ascii")
    head = b"".join([
        field("0", 8), field("X X X X", 80), field("Startdate 01-JAN-2000 X X X", 80),
        field("01.01.00", 8), field("00.00.00", 8), field(str(256 * (ns + 1)), 8), field("", 44),
        field(str(n_records), 8), field("1", 8), field(str(ns), 4)])
    head += b"".join(field(n, 16) for n in names)
    head += b"".join(field("AgAgCl electrode", 80) for _ in names)
    head += b"".join(field("mV", 8) for _ in names)
    for key in ("pmin", "pmax"):
        for g, base in zip(gains, bases):
            d = -2048 if key == "pmin" else 2047
            head += field("%.4f" % ((d - base) / g), 8)
    head += b"".join(field("-2048", 8) for _ in names)
    head += b"".join(field("2047", 8) for _ in names)
    head += b"".join(field("", 80) for _ in names)
    head += b"".join(field(str(per_record), 8) for _ in names)
    head += b"".join(field("", 32) for _ in names)
    body = bytearray()
    for r in range(n_records):
        for sig in digital:
            body += struct.pack("<%dh" % per_record, *sig[r * per_record:(r + 1) * per_record])
    with open(path, "wb") as f:
        f.write(head + bytes(body))


def write_npy(path, values):
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }" % len(values)
    total = 10 + len(header) + 1
    header += " " * ((64 - total % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        f.write(struct.pack("<%df" % len(values), *values))


def fixtures(data_dir, out):
    ucr = read_ucr(data_dir)[:20000]  # 80 s at 250 Hz
    with open(os.path.join(out, "ucr.csv"), "w") as f:
        f.write("\n".join("%g" % v for v in ucr) + "\n")
    with open(os.path.join(out, "ucr.f32"), "wb") as f:
        f.write(struct.pack("<%df" % len(ucr), *ucr))
    with open(os.path.join(out, "ucr.f64"), "wb") as f:
        f.write(struct.pack("<%dd" % len(ucr), *ucr))
    with open(os.path.join(out, "ucr.i16"), "wb") as f:
        f.write(struct.pack("<%dh" % len(ucr), *[int(round(v * 1000)) for v in ucr]))
    write_npy(os.path.join(out, "ucr.npy"), ucr)
    with open(os.path.join(out, "ucr.json"), "w") as f:
        json.dump({"fs": 250, "signal": ucr}, f)

    fs, digital, gains, bases, names = read_mit212(data_dir, "119", 360 * 40)
    with open(os.path.join(out, "mit.csv"), "w") as f:
        for a, b in zip(*digital):
            f.write("%.3f,%.3f\n" % ((a - bases[0]) / gains[0], (b - bases[1]) / gains[1]))
    write_edf(os.path.join(out, "mit.edf"), fs, digital, gains, bases, names)

    # 32 different recordings for the parallel clients: 24 s windows of the UCR excerpt.
    full = read_ucr(data_dir)
    for k in range(32):
        part = full[k * 1300:k * 1300 + 6000]
        with open(os.path.join(out, "par%02d.csv" % k), "w") as f:
            f.write("\n".join("%g" % v for v in part) + "\n")
    # A body that is slow to send (graceful shutdown, overload): about 150 KB.
    with open(os.path.join(out, "slow.csv"), "w") as f:
        f.write("\n".join("%.6f" % v for v in full[:20000]) + "\n")
    # A body that takes a worker a while (overload): the excerpt tiled to 6 M float32 samples.
    import array
    tiled = array.array("f", full) * (6_000_000 // len(full) + 1)
    with open(os.path.join(out, "busy.f32"), "wb") as f:
        f.write(tiled[:6_000_000].tobytes())


def same(a, b):
    x = TIMING.sub(b"", open(a, "rb").read())
    y = TIMING.sub(b"", open(b, "rb").read())
    if x == y:
        return 0
    i = next((k for k in range(min(len(x), len(y))) if x[k] != y[k]), min(len(x), len(y)))
    print("# differ at byte %d: %r vs %r" % (i, x[max(0, i - 40):i + 40], y[max(0, i - 40):i + 40]))
    return 1


def error(path, status, code):
    try:
        doc = json.load(open(path))
        e = doc["error"]
        good = (e["status"] == int(status) and e["code"] == code and isinstance(e["message"], str)
                and e["message"] and set(doc) == {"error"})
    except (ValueError, KeyError, TypeError) as exc:
        print("# not a JSON error document: %s" % exc)
        return 1
    if not good:
        print("# got %s" % json.dumps(doc)[:300])
    return 0 if good else 1


def openapi(doc_path, routes_path):
    doc = json.load(open(doc_path))
    assert doc["openapi"].startswith("3.1"), "not OpenAPI 3.1"
    documented = set()
    for path, item in doc["paths"].items():
        for method in item:
            if method in ("get", "post", "put", "delete", "patch", "head", "options"):
                documented.add((method.upper(), path))
    served = set()
    for line in open(routes_path):
        if line.strip() and not line[0].isspace():  # indented lines: a route's details
            method, path = line.split()
            served.add((method, path))
    missing = served - documented
    extra = documented - served
    for m, p in sorted(missing):
        print("# served but not documented: %s %s" % (m, p))
    for m, p in sorted(extra):
        print("# documented but not served: %s %s" % (m, p))
    # every $ref resolves
    text = json.dumps(doc)
    for ref in set(re.findall(r'"\$ref": "#/([^"]+)"', text)):
        node = doc
        for part in ref.split("/"):
            if part not in node:
                print("# unresolved $ref #/%s" % ref)
                return 1
            node = node[part]
    return 0 if not missing and not extra and served else 1


def slowloris(port, timeout_s):
    s = socket.create_connection(("127.0.0.1", int(port)))
    s.sendall(b"POST /v1/analyze?fs=250 HTTP/1.1\r\nHost: x\r\nContent-Type: text/csv\r\n"
              b"Content-Length: 1000\r\n\r\n0.1\n0.2\n")
    s.settimeout(float(timeout_s) + 10)
    start = time.time()
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
    except socket.timeout:
        print("# still open after %.1f s" % (time.time() - start))
        return 1
    except ConnectionResetError:
        pass
    return 0


def bigcsv(out, n):
    ucr = ["%g" % v for v in read_ucr(os.environ.get("ECG_SHARED_DATA", "../shared/data"))]
    n = int(n)
    with open(out, "w") as f:
        block = "\n".join(ucr) + "\n"
        full, rest = divmod(n, len(ucr))
        for _ in range(full):
            f.write(block)
        if rest:
            f.write("\n".join(ucr[:rest]) + "\n")


def _read_exact_discard(conn, buf, n, pending):
    """Discards n body bytes, starting with those already in pending; returns the leftover."""
    take = min(n, len(pending))
    n -= take
    pending = pending[take:]
    view = memoryview(buf)
    while n > 0:
        got = conn.recv_into(view, min(n, len(buf)))
        if not got:
            raise ConnectionError("client went away")
        n -= got
    return pending


def _serve_sink(conn):
    buf = bytearray(4 << 20)
    pending = b""
    while True:
        while b"\r\n\r\n" not in pending:
            chunk = conn.recv(65536)
            if not chunk:
                return
            pending += chunk
        head, pending = pending.split(b"\r\n\r\n", 1)
        headers = {}
        for line in head.split(b"\r\n")[1:]:
            key, _, value = line.partition(b":")
            headers[key.strip().lower()] = value.strip()
        if b"expect" in headers:
            conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        if b"content-length" in headers:
            pending = _read_exact_discard(conn, buf, int(headers[b"content-length"]), pending)
        elif headers.get(b"transfer-encoding", b"").lower() == b"chunked":
            while True:
                while b"\r\n" not in pending:
                    pending += conn.recv(65536)
                size_line, pending = pending.split(b"\r\n", 1)
                size = int(size_line.split(b";")[0], 16)
                pending = _read_exact_discard(conn, buf, size + 2, pending)
                if size == 0:
                    break
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Type: text/plain\r\n\r\nok\n")


def sink(port_file):
    import threading
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    with open(port_file, "w") as f:
        f.write("%d\n" % server.getsockname()[1])
    while True:
        conn, _ = server.accept()
        def run(c=conn):
            try:
                _serve_sink(c)
            except (ConnectionError, OSError, ValueError):
                pass
            finally:
                c.close()
        threading.Thread(target=run, daemon=True).start()


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    sys.exit({"fixtures": fixtures, "same": same, "error": error, "openapi": openapi,
              "slowloris": slowloris, "bigcsv": bigcsv, "sink": sink}[cmd](*args) or 0)
