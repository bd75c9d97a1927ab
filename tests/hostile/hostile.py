#!/usr/bin/env python3
"""Hostile clients against the real `ecgd serve` on 127.0.0.1 (python3 standard library only).

  hostile.py --ecgd build/ecgd [--soak] [--backend cpu|cuda] [--data ../shared/data]

Starts its own servers (a free port each), attacks them, and prints `ok N - ...`,
`not ok N - ...` or `skip N - ... (reason)` per check; exits 1 on any failure. Quick mode
(make test) uses bounded counts and takes about a minute; --soak (make soak) runs the long
cases and prints the figures bench/RESULTS.md quotes.

Covers: strict framing (duplicate or conflicting Content-Length, CL with TE, unknown
Transfer-Encoding, garbage request lines, bad header names, missing Host), one meaning per
request (repeated options, %00 and control characters, non-decimal numbers, trailing text and
duplicate keys in JSON bodies), body limits on GET routes, the token before 404/405, signals,
slowloris and trickling uploads from one address while another is served (main and admin
port), slow uploads cut, FIN and RST mid-upload noticed at once, the memory budget (503 or 413
before the body is read), answers not read held in the budget and slow readers cut, peak memory of a big JSON body, log flooding, and shutdown with
uploads in flight (every client gets an answer or a 503, none a silent close).
"""
import argparse
import json
import os
import resource
import signal
import socket
import struct
import sys
import tempfile
import threading
import time

import hostile_lib
from hostile_lib import (Server, check, connect, csv_body, error_code, expect, mit_digital,
                         parse_responses, raw, read_all, request, skip, ucr_values)


# ------------------------------------------------------------------ checks

def framing(srv):
    p = srv.port
    cl2 = (b"POST /v1/analyze?fs=360 HTTP/1.1\r\nHost: x\r\nContent-Type: text/csv\r\n"
           b"Content-Length: 5\r\nContent-Length: 40\r\n\r\n1\n2\n3GET /healthz HTTP/1.1\r\n"
           b"Host: x\r\n\r\n")
    responses, how, _ = raw(p, cl2)
    check("conflicting Content-Length: one 400, nothing else on the connection, closed",
          len(responses) == 1 and responses[0][0] == 400 and how in ("eof", "reset") and
          error_code(responses[0][2]) == "conflicting_content_length", (responses, how))
    same = (b"POST /v1/analyze?fs=360 HTTP/1.1\r\nHost: x\r\nContent-Type: text/csv\r\n"
            b"Content-Length: 5\r\nContent-Length: 5\r\n\r\n1\n2\n3")
    responses, how, _ = raw(p, same)
    check("repeated equal Content-Length: 400 and close",
          len(responses) == 1 and responses[0][0] == 400 and how != "timeout", (responses, how))
    cases = [
        ("Content-Length with Transfer-Encoding", 400, "content_length_with_transfer_encoding",
         b"POST /v1/analyze?fs=360 HTTP/1.1\r\nHost: x\r\nContent-Type: text/csv\r\n"
         b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
        ("unknown Transfer-Encoding", 501, "unsupported_transfer_encoding",
         b"POST /v1/analyze?fs=360 HTTP/1.1\r\nHost: x\r\nContent-Type: text/csv\r\n"
         b"Transfer-Encoding: gzip\r\n\r\nabc"),
        ("Transfer-Encoding gzip, chunked", 501, "unsupported_transfer_encoding",
         b"POST /v1/analyze?fs=360 HTTP/1.1\r\nHost: x\r\nContent-Type: text/csv\r\n"
         b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"),
        ("space before the colon of a header", 400, "bad_header",
         b"POST /v1/analyze?fs=360 HTTP/1.1\r\nHost: x\r\nContent-Type: text/csv\r\n"
         b"Content-Length : 5\r\n\r\n1\n2\n3"),
        ("Content-Length not a number (libmicrohttpd's own 400)", 400, None,
         b"POST /v1/analyze?fs=360 HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\n1\n2\n3"),
        ("Content-Length list (libmicrohttpd's own 400)", 400, None,
         b"POST /v1/analyze?fs=360 HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\n\r\n1\n2\n3"),
        ("HTTP/1.1 without Host", 400, "bad_host", b"GET /healthz HTTP/1.1\r\n\r\n"),
        ("two Host headers", 400, "bad_host",
         b"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
        ("garbage request line", 400, None, b"HELLO THERE\r\n\r\n"),
        ("control bytes as the method", 400, "bad_method",
         b"\x01\x02\x03 /healthz HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("absolute-form target", 400, "bad_uri", b"GET http://x/healthz HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("header line without a colon", 400, None,
         b"GET /healthz HTTP/1.1\r\nHost: x\r\nGarbage line\r\n\r\n"),
    ]
    for desc, status, code, data in cases:
        responses, how, got = raw(p, data)
        cond = (len(responses) == 1 and responses[0][0] == status and how != "timeout" and
                (code is None or error_code(responses[0][2]) == code))
        check("%s: one %d%s and close" % (desc, status, " " + code if code else ""), cond,
              (got[:300], how))


def meaning(srv, values):
    p = srv.port
    csv = csv_body(values, 3000)
    hdr = {"Content-Type": "text/csv"}
    expect("repeated query option fs", request("POST", "/v1/analyze?fs=360&fs=250", p, csv, hdr),
           400, "repeated_parameter")
    expect("%00 in a query value", request("POST", "/v1/analyze?fs=360%00junk", p, csv, hdr), 400,
           "bad_uri")
    expect("%00 in the path", request("GET", "/healthz%00.json", p), 400, "bad_uri")
    expect("%0a in the path", request("GET", "/healthz%0a", p), 400, "bad_uri")
    expect("a bad percent escape", request("GET", "/healthz%zz", p), 400, "bad_uri")
    expect("fs=0x168", request("POST", "/v1/analyze?fs=0x168", p, csv, hdr), 400, "bad_fs")
    expect("fs=inf", request("POST", "/v1/analyze?fs=inf", p, csv, hdr), 400, "bad_fs")
    expect("fs=+360", request("POST", "/v1/analyze?fs=%2B360", p, csv, hdr), 400, "bad_fs")
    expect("fs=360 answered", request("POST", "/v1/analyze?fs=360", p, csv, hdr), 200)
    js = {"Content-Type": "application/json"}
    sig = ", ".join("%g" % v for v in values[:3000])
    expect("JSON trailing garbage",
           request("POST", "/v1/analyze", p, ('{"fs": 360, "signal": [%s]} x' % sig).encode(), js),
           400, "bad_json")
    expect("JSON duplicate key",
           request("POST", "/v1/analyze", p,
                   ('{"fs": 360, "signal": [%s], "fs": 250}' % sig).encode(), js),
           400, "bad_json")
    expect("JSON samples x leads, lead by name",
           request("POST", "/v1/analyze?lead=V5", p,
                   ('{"fs": 360, "leads": ["MLII", "V5"], "signal": [%s]}' %
                    ", ".join("[0, %g]" % v for v in values[:3000])).encode(), js), 200)
    if srv.models:
        expect("decode: trailing garbage",
               request("POST", "/v1/models/default/decode", p, b'{"latent": [[0, 0]]} x', js),
               400, "bad_json")
        expect("decode: duplicate key",
               request("POST", "/v1/models/default/decode", p,
                       b'{"latent": [[0, 0]], "latent": [[1, 1]]}', js), 400, "bad_json")


def get_bodies(srv):
    p = srv.port
    expect("GET with a declared body", request("GET", "/healthz", p, b"abcde"), 413,
           "body_too_large")
    s = connect(p)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
    sent = 0
    chunk = b"10000\r\n" + b"x" * 0x10000 + b"\r\n"
    try:
        while sent < (200 << 20):
            s.sendall(chunk)
            sent += len(chunk)
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        pass
    got, how = read_all(s, 5)
    s.close()
    responses = parse_responses(got)
    check("endless chunked body to GET /healthz: 413 and cut well before 200 MB",
          sent < (200 << 20) and responses and responses[0][0] == 413, (sent, got[:200], how))


def token(ecgd, backend, base):
    srv = Server(ecgd, backend, base, env={"ECGD_TOKEN": "s3cret"})
    p = srv.port
    expect("token: unknown /v1/ path is 401, not 404", request("GET", "/v1/nothing", p), 401,
           "unauthorized")
    expect("token: wrong method on /v1/models is 401, not 405",
           request("POST", "/v1/models", p, b"{}"), 401, "unauthorized")
    expect("token: with it, the unknown path is 404",
           request("GET", "/v1/nothing", p, headers={"Authorization": "Bearer s3cret"}), 404,
           "not_found")
    expect("token: probes need none", request("GET", "/healthz", p), 200)
    # A refused upload sent without waiting for 100 Continue (curl's way below 1 MiB): its body
    # is read and dropped, the 401 follows it and the connection stays open. Closing with the
    # body unread would let a TCP reset overtake the 401 (RFC 9112 section 9.6).
    body = b"1\n" * 300000
    post = (b"POST /v1/analyze?fs=360 HTTP/1.1\r\nHost: x\r\nContent-Type: text/csv\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body))
    then = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    responses, how, got = raw(p, post + body + then)
    check("token: a refused 600 KB upload sent whole: 401 after its body, the connection kept "
          "(the next request on it answered)",
          len(responses) == 2 and responses[0][0] == 401 and
          error_code(responses[0][2]) == "unauthorized" and
          responses[0][1].get("www-authenticate", "").startswith("Bearer") and
          responses[1][0] == 200 and how == "eof", (got[:300], how))
    # The same upload awaiting 100 Continue: answered at once, no 100, and closed unread.
    s = connect(p)
    s.sendall(post.replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n"))
    got, how = read_all(s, 5)
    s.close()
    responses = parse_responses(got)
    check("token: the same upload awaiting 100 Continue: 401 at once, no 100, closed",
          len(responses) == 1 and responses[0][0] == 401 and
          responses[0][1].get("connection") == "close" and how == "eof", (got[:300], how))
    srv.stop()


def signals(srv):
    for sig, name in ((signal.SIGHUP, "SIGHUP"), (signal.SIGUSR1, "SIGUSR1"),
                      (signal.SIGUSR2, "SIGUSR2")):
        srv.proc.send_signal(sig)
        time.sleep(0.3)
        st = request("GET", "/healthz", srv.port)[0]
        check("%s leaves the server running and answering" % name, srv.alive() and st == 200)
    # SIGHUP reloads the models (registry.c): logged as models_reloaded (or reload_failed)
    check("signals are logged", ('"event":"models_reloaded"' in srv.text() or
                                 '"event":"reload_failed"' in srv.text()) and
          "SIGUSR1 ignored" in srv.text())


def timed_get(port, path, source):
    t0 = time.time()
    st = request("GET", path, port, source=source, timeout=10)[0]
    return st, time.time() - t0


def slowloris(srv, values, n_headers, n_trickle, attackers):
    """n_headers slow header connections and n_trickle trickling uploads from the attacker
    addresses; returns the sockets (kept open by the caller while it probes)."""
    socks = []
    refused = 0
    for i in range(n_headers):
        src = attackers[i % len(attackers)]
        try:
            s = connect(srv.port, src, timeout=5)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: ")
            socks.append(s)
        except OSError:
            refused += 1
    for i in range(n_trickle):
        src = attackers[i % len(attackers)]
        try:
            s = connect(srv.port, src, timeout=5)
            s.sendall(b"POST /v1/analyze?fs=250 HTTP/1.1\r\nHost: x\r\nContent-Type: text/csv\r\n"
                      b"Content-Length: 100000\r\n\r\n1")
            socks.append(s)
        except OSError:
            refused += 1
    return socks, refused


def must_show_2(srv, values):
    csv = csv_body(values, 3000)
    socks, refused = slowloris(srv, values, 4200, 200, ["127.0.0.1"])
    st, dt = timed_get(srv.port, "/healthz", "127.0.0.2")
    check("under 4,200 slow headers + 200 trickling uploads from 127.0.0.1: /healthz from "
          "127.0.0.2 in < 1 s (%.3f s)" % dt, st == 200 and dt < 1.0, (st, dt))
    st, dt = timed_get(srv.admin_port, "/readyz", "127.0.0.2")
    check("same: /readyz on the admin port in < 1 s (%.3f s)" % dt, st == 200 and dt < 1.0)
    got = request("POST", "/v1/analyze?fs=250", srv.port, csv, {"Content-Type": "text/csv"},
                  source="127.0.0.2")
    expect("same: an analysis from 127.0.0.2 is answered", got, 200)
    held = srv.metric("ecgd_connections")
    check("127.0.0.1 holds at most --max-conns-per-ip connections (%s)" % held,
          held is not None and held <= 64 + 4, held)
    for s in socks:
        s.close()
    return True


def spread_uploads(srv, values):
    """200 trickling uploads from 4 addresses (within the per-address limit) take no admission
    slot: an analysis is still answered; then the slow ones are cut by the rate floor."""
    csv = csv_body(values, 3000)
    socks, _ = slowloris(srv, values, 0, 200, ["127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6"])
    got = request("POST", "/v1/analyze?fs=250", srv.port, csv, {"Content-Type": "text/csv"},
                  source="127.0.0.2")
    expect("200 trickling uploads from 4 addresses hold no admission slot: analysis", got, 200)
    time.sleep(srv.header_timeout + 1.5)
    cut = 0
    for s in socks:
        data, how = read_all(s, 0.5)
        if b" 408 " in data[:20] or how in ("eof", "reset"):
            cut += 1
        s.close()
    check("trickling uploads cut by the minimum upload rate (%d of 200, 408)" % cut, cut == 200)
    slow = srv.metric('ecgd_connection_events_total{event="slow_upload"}')
    check("ecgd_connection_events_total{event=\"slow_upload\"} counts them (%s)" % slow,
          slow is not None and slow >= 200)


def header_deadline(srv):
    s = connect(srv.port)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    t0 = time.time()
    data, how = read_all(s, srv.header_timeout + 5)
    dt = time.time() - t0
    s.close()
    check("headers not complete in --header-timeout-s: 408 and closed (after %.1f s)" % dt,
          b" 408 " in data[:20] and how != "timeout", (data[:100], how))


def disconnects(srv, count):
    """count FIN and count RST mid-upload: no request (slot, buffer) held past ~1 s."""
    base = srv.metric("ecgd_http_requests_in_flight")
    worst = 0.0
    for kind in ("fin", "rst"):
        for i in range(count):
            s = connect(srv.port)
            declared = 20 << 20
            s.sendall(("POST /v1/analyze?fs=250 HTTP/1.1\r\nHost: x\r\nContent-Type: text/csv\r\n"
                       "Content-Length: %d\r\n\r\n" % declared).encode())
            s.sendall(b"1\n" * ((5 << 20) // 2))
            time.sleep(0.05)
            if kind == "rst":
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                s.close()
            else:
                s.shutdown(socket.SHUT_WR)
            t0 = time.time()
            gone = False
            while time.time() - t0 < 3:
                if srv.metric("ecgd_http_requests_in_flight") <= base:
                    gone = True
                    break
                time.sleep(0.02)
            worst = max(worst, time.time() - t0)
            if kind == "fin":
                s.close()
            if not gone:
                break
        check("%d %s disconnects mid-upload (5 of 20 MB sent): each request freed, worst "
              "%.2f s" % (count, kind.upper(), worst), gone and worst < 1.5, worst)
    return worst


def memory_budget(ecgd, backend, base, values):
    srv = Server(ecgd, backend, base + ["--memory-budget-mb", "64"])
    hdr = {"Content-Type": "text/csv"}
    s = connect(srv.port)
    s.sendall(b"POST /v1/analyze?fs=250 HTTP/1.1\r\nHost: x\r\nContent-Type: text/csv\r\n"
              b"Content-Length: 200000000\r\n\r\n")
    data, how = read_all(s, 5)
    s.close()
    responses = parse_responses(data)
    check("a body whose worst case exceeds the whole budget: 413 before the body",
          responses and responses[0][0] == 413, data[:200])
    # Two uploads whose worst cases fit one at a time: the second waits for room (503).
    first = connect(srv.port)
    first.sendall(b"POST /v1/analyze?fs=250 HTTP/1.1\r\nHost: x\r\nContent-Type: text/csv\r\n"
                  b"Content-Length: 4000000\r\n\r\n1\n")
    time.sleep(0.2)
    got = request("POST", "/v1/analyze?fs=250", srv.port, b"1\n" * 1000000, hdr)
    expect("a second body that does not fit beside the first: 503 memory_busy", got, 503,
           "memory_busy")
    check("... with Retry-After", "retry-after" in got[1])
    first.close()
    time.sleep(0.5)
    expect("room comes back when the first goes",
           request("POST", "/v1/analyze?fs=250", srv.port, csv_body(values, 3000), hdr), 200)
    srv.stop()


def reader(port, source, path, rcvbuf=4096):
    """A connection that asks for path and reads nothing until told (by default a tiny receive
    buffer, so that the kernel cannot take the answer off the server's hands)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((source, 0))
    s.settimeout(10)
    s.connect(("127.0.0.1", port))
    s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path).encode())
    return s


def keep_window(srv, data):
    """Keeps 10 minutes of record 101 for browsing; the path of its 200,000-point signal window
    (~2 MB of JSON), or None."""
    samples = mit_digital(data, 216000)  # 10 minutes at 360 Hz
    got = request("POST", "/v1/analyses?fs=360&include=summary", srv.port,
                  struct.pack("<%df" % len(samples), *samples),
                  {"Content-Type": "application/octet-stream"})
    if not expect("10 minutes of record 101 kept for browsing", got, 201):
        return None
    return got[1].get("location") + "/signal?points=200000"


def unread_answers(ecgd, backend, base, data):
    """Answers waiting for clients that do not read them are held in the memory budget, and an
    answer read too slowly is cut: tiny requests for large answers (a signal window of a kept
    analysis) cannot run the server out of memory. The send buffers are capped at 64 KiB so
    that the kernel cannot take a 2 MB answer off the server's hands; 16 HTTP threads build
    answers side by side (a CUDA server has 64), so the answers being built count too."""
    budget_mb = 32
    # No minimum download rate here: the answers stay held for as long as the check takes.
    # AddressSanitizer's quarantine would keep the refused answers' freed buffers resident.
    asan = os.environ.get("ASAN_OPTIONS", "")
    srv = Server(ecgd, backend, base + ["--memory-budget-mb", str(budget_mb),
                                        "--max-conns-per-ip", "0", "--send-buffer-kib", "64",
                                        "--min-download-kib-s", "0", "--io-threads", "16"],
                 env={"ASAN_OPTIONS": (asan + ":" if asan else "") + "quarantine_size_mb=0"})
    window = keep_window(srv, data)
    if not window:
        srv.stop()
        return
    size = len(request("GET", window, srv.port)[2])
    n = 150  # 300 MB of answers: without the budget the server grows by about that
    rss0 = srv.status_kb("VmRSS")
    socks = [reader(srv.port, "127.0.%d.%d" % (1 + i // 200, 2 + i % 200), window)
             for i in range(n)]
    # Wait until every one has its answer's head queued (or 30 s): peek without reading.
    heads = [b""] * n
    deadline = time.time() + 30
    while time.time() < deadline and not all(heads):
        for i, s in enumerate(socks):
            if not heads[i]:
                try:
                    heads[i] = s.recv(12, socket.MSG_PEEK | socket.MSG_DONTWAIT)
                except BlockingIOError:
                    pass
        time.sleep(0.1)
    grown_mb = (srv.status_kb("VmRSS") - rss0) / 1024.0
    reserved = srv.metric("ecgd_memory_reserved_bytes")
    ok200 = sum(h.startswith(b"HTTP/1.1 200") for h in heads)
    busy = sum(h.startswith(b"HTTP/1.1 503") for h in heads)
    # Beyond the budget: each connection's 64 KiB and what the allocator keeps per thread of
    # the buffers it grew while building (up to about an answer's size each).
    slack_mb = 16 * 2 + n * 64 / 1024.0
    check("%d clients that do not read a %.1f MB answer hold at most the memory budget (the "
          "server grew %.0f MB; budget %d MB, slack %.0f)" % (n, size / 1e6, grown_mb, budget_mb,
                                                             slack_mb),
          grown_mb < budget_mb + slack_mb)
    check("... the answers beyond it are refused 503 (%d) and the others sent (%d)" % (busy, ok200),
          busy > 0 and ok200 > 0 and busy + ok200 == n)
    check("... and counted: ecgd_memory_reserved_bytes %.1f MB for %d answers held"
          % (reserved / 2**20, ok200), ok200 * size <= reserved <= budget_mb << 20)
    for s in socks:
        s.close()
    deadline = time.time() + 10
    while time.time() < deadline and srv.metric("ecgd_memory_reserved_bytes"):
        time.sleep(0.1)
    check("... all given back when those clients go",
          srv.metric("ecgd_memory_reserved_bytes") == 0)
    got = request("GET", window, srv.port)
    check("... and the window is answered whole again (%d bytes)" % len(got[2]),
          got[0] == 200 and len(got[2]) == size)
    srv.stop()

    # A trickle: 1 KiB every half second, under the default minimum of 4 KiB/s.
    srv = Server(ecgd, backend, base + ["--header-timeout-s", "2", "--send-buffer-kib", "64"])
    window = keep_window(srv, data)
    if not window:
        srv.stop()
        return
    s = reader(srv.port, "127.0.0.1", window)
    t0, read, cut = time.time(), 0, False
    while time.time() - t0 < 20:
        try:
            chunk = s.recv(1024)
        except (ConnectionResetError, socket.timeout):
            chunk = b""
        if not chunk:
            cut = True
            break
        read += len(chunk)
        time.sleep(0.5)
    s.close()
    took = time.time() - t0
    check("an answer read at 2 KiB/s is cut after the grace (%.1f s, %d of %d bytes read)"
          % (took, read, size), cut and read < size and took < 10)
    check("... counted: ecgd_connection_events_total{event=\"slow_download\"}",
          srv.metric('ecgd_connection_events_total{event="slow_download"}') == 1)
    # Read at a steady pace well above the minimum: the whole answer.
    s = reader(srv.port, "127.0.0.1", window, 65536)
    t0, data = time.time(), b""
    while time.time() - t0 < 30:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        if rest and len(rest) >= size:
            break
        time.sleep(0.02)
    s.close()
    check("an answer read at a steady pace is read whole (%d bytes in %.1f s)"
          % (len(data), time.time() - t0), data.startswith(b"HTTP/1.1 200") and
          len(data.partition(b"\r\n\r\n")[2]) == size)
    srv.stop()


def json_body(data, mb):
    """A JSON document of mb MB: MIT-BIH record 101's integer samples at 360 Hz."""
    digital = mit_digital(data, mb * 1000000 // 4)
    body = ('{"fs": 360, "signal": [' + ", ".join(map(str, digital)))[: mb * 1000000 - 2]
    return (body[: body.rfind(",")] + "]}").encode()


def json_memory(ecgd, backend, base, data, mb):
    body = json_body(data, mb)
    srv = Server(ecgd, backend, base)
    before = srv.hwm_kb()
    got = request("POST", "/v1/analyze?include=summary", srv.port, body,
                  {"Content-Type": "application/json"}, timeout=300)
    after = srv.hwm_kb()
    ratio = (after - before) * 1024.0 / len(body)
    expect("a %d MB JSON body of integer samples is analysed" % mb, got, 200)
    with open(ecgd, "rb") as f:
        sanitized = b"__asan_init" in f.read()
    if sanitized:
        skip("its peak RSS rise is at most 4x the body (%.2fx)" % ratio,
             "AddressSanitizer build: shadow memory and quarantine are not the program's")
    else:
        check("its peak RSS rise is at most 4x the body: %.0f MB, %.2fx" %
              ((after - before) / 1024.0, ratio), ratio <= 4.0)
    srv.stop()
    return ratio


def out_of_memory(ecgd, backend, base, data, body):
    """Valid JSON bodies under a 400 MB address-space limit (ulimit -v): the documented
    out-of-memory answer, never bad_json, and the server keeps serving."""
    with open(ecgd, "rb") as f:
        if b"__asan_init" in f.read():
            skip("out of memory under ulimit -v", "AddressSanitizer reserves terabytes of "
                 "address space")
            return
    # One worker and no batching (a CUDA batcher's contexts are not what this checks)
    srv = Server(ecgd, backend, base + ["--workers", "1", "--max-batch", "1"],
                 address_space_mb=400)
    if not srv.port:
        skip("out of memory under ulimit -v", "the server does not start in 400 MB")
        srv.stop()
        return
    try:
        got = request("POST", "/v1/analyze?include=summary", srv.port, body,
                      {"Content-Type": "application/json"}, timeout=120)
    except OSError as e:
        srv.stop()
        if backend == "cuda":
            # The JSON reader is host code, checked here on the CPU backend; a CUDA server
            # under 400 MB of address space may not survive its driver's own reservations.
            skip("out of memory under ulimit -v", "the CUDA server exited under the 400 MB "
                 "address-space limit (%s)" % e)
        else:
            check("a valid %d MB JSON body under a 400 MB address-space limit: the server "
                  "answers (%s)" % (len(body) // 1000000, e), False)
        return
    check("a valid %d MB JSON body under a 400 MB address-space limit: out_of_memory "
          "(got %d %s), never bad_json" % (len(body) // 1000000, got[0], error_code(got[2])),
          got[0] in (500, 503) and error_code(got[2]) in ("out_of_memory", "memory_busy"),
          got[2][:200])
    expect("... and the server still answers", request("GET", "/healthz", srv.port), 200)
    srv.stop()


def log_flood(srv):
    lines_before = srv.text().count("\n")
    base = srv.metric("ecgd_http_requests_in_flight")
    socks = []
    for i in range(300):
        try:
            s = connect(srv.port, "127.0.0.7")
            s.sendall(b"GET /healthz HTTP/1.1\r\n")
            socks.append(s)
        except OSError:
            pass
    time.sleep(0.5)
    for s in socks:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()
    time.sleep(1.5)
    lines = srv.text().count("\n") - lines_before
    check("300 aborted connections write at most ~10 log lines a second (%d lines)" % lines,
          0 < lines <= 40, lines)
    check("and leave no request behind (in flight %s, before %s)" %
          (srv.metric("ecgd_http_requests_in_flight"), base),
          srv.metric("ecgd_http_requests_in_flight") <= base)
    suppressed = srv.metric("ecgd_log_lines_suppressed_total")
    check("suppressed lines are counted (%s)" % suppressed, suppressed is not None and
          suppressed > 0)


def shutdown_round(ecgd, backend, base, values, drain_s, uploads):
    srv = Server(ecgd, backend, base + ["--drain-s", str(drain_s), "--workers", "2"])
    body = csv_body(values, 20000)
    results = [None] * uploads

    def client(i):
        try:
            s = connect(srv.port, timeout=60)
            s.sendall(("POST /v1/analyze?fs=250&include=summary HTTP/1.1\r\nHost: x\r\n"
                       "Content-Type: text/csv\r\nContent-Length: %d\r\n\r\n" % len(body)).encode())
            sent = 0
            step = 4096
            while sent < len(body):
                s.sendall(body[sent:sent + step])
                sent += step
                time.sleep(0.002 * (i % 8))
            data, how = read_all(s, 60)
        except (BrokenPipeError, ConnectionResetError) as e:
            try:
                data, how = read_all(s, 5)
            except OSError:
                data, how = b"", "reset"
        except OSError as e:
            data, how = b"", "error %s" % e
        responses = parse_responses(data)
        results[i] = responses[0][0] if responses else ("silent", how)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(uploads)]
    for t in threads:
        t.start()
    time.sleep(0.4)
    srv.proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(120)
    rc = srv.stop()
    bad = [r for r in results if r not in (200, 503)]
    return bad, results.count(200), results.count(503), rc


def shutdown(ecgd, backend, base, values, drains, loops, uploads):
    for drain_s in drains:
        lost = 0
        answered = refused = 0
        bad_rc = 0
        for _ in range(loops):
            bad, n200, n503, rc = shutdown_round(ecgd, backend, base, values, drain_s, uploads)
            lost += len(bad)
            answered += n200
            refused += n503
            bad_rc += rc != 0
        check("shutdown, drain %d s, %d uploads in flight, %d rounds: every client got 200 or "
              "503 (%d answers, %d 503, %d lost), exit 0" %
              (drain_s, uploads, loops, answered, refused, lost), lost == 0 and bad_rc == 0,
              bad if lost else "")


def percentile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def analyses_per_s(port, body, seconds, source="127.0.0.2"):
    """Sequential analyses from one legitimate client for `seconds`: answers a second, and how
    many were not 200."""
    t0 = time.time()
    done = bad = 0
    while time.time() - t0 < seconds:
        st = request("POST", "/v1/analyze?fs=250&include=summary", port, body,
                     {"Content-Type": "text/csv"}, source=source, timeout=30)[0]
        done += 1
        bad += st != 200
    return done / (time.time() - t0), bad


def soak_attack(ecgd, backend, base, values, figures):
    """Must-show 3a: 10,000 slowloris connections plus 1,000 trickling uploads from 20 attacker
    addresses (127.0.0.10-29): probe latency from another address, and analysis throughput as a
    ratio to the same server's throughput without the attack, in the same run."""
    # No header deadline and no rate floor: the attack holds what it opens for the whole run;
    # only the per-address limit and the admin listener stand between it and the probes.
    srv = Server(ecgd, backend, base + ["--workers", "2", "--header-timeout-s", "3600",
                                       "--min-upload-kib-s", "0"])
    body = csv_body(values, 7500)
    analyses_per_s(srv.port, body, 3)  # warm-up: pools, caches, the CPU's clock
    unloaded_before, bad0 = analyses_per_s(srv.port, body, 10)
    attackers = ["127.0.0.%d" % i for i in range(10, 30)]
    t0 = time.time()
    socks, refused = slowloris(srv, values, 10000, 1000, attackers)
    setup_s = time.time() - t0
    held = srv.metric("ecgd_connections")
    lat = {"/healthz": [], "/readyz": []}
    admin = {"/healthz": [], "/readyz": []}
    stop = threading.Event()
    loaded = {}

    def load():
        loaded["rate"], loaded["bad"] = analyses_per_s(srv.port, body, 10, "127.0.0.3")

    worker = threading.Thread(target=load)
    worker.start()
    while worker.is_alive():
        for path in lat:
            st, dt = timed_get(srv.port, path, "127.0.0.2")
            lat[path].append(dt if st == 200 else float("inf"))
            st, dt = timed_get(srv.admin_port, path, "127.0.0.2")
            admin[path].append(dt if st == 200 else float("inf"))
        time.sleep(0.02)
    worker.join()
    stop.set()
    for s_ in socks:
        s_.close()
    time.sleep(1)
    unloaded_after, bad1 = analyses_per_s(srv.port, body, 10)
    bad0 += bad1
    unloaded = (unloaded_before + unloaded_after) / 2
    ratio = loaded["rate"] / unloaded if unloaded else 0
    figures["attack"] = {
        "slow_connections_opened": len(socks), "refused_at_connect": refused,
        "held_by_server": held, "setup_s": setup_s,
        "probes": len(lat["/healthz"]),
        "healthz_p50_ms": 1000 * percentile(lat["/healthz"], 0.5),
        "healthz_p99_ms": 1000 * percentile(lat["/healthz"], 0.99),
        "readyz_p99_ms": 1000 * percentile(lat["/readyz"], 0.99),
        "admin_healthz_p99_ms": 1000 * percentile(admin["/healthz"], 0.99),
        "admin_readyz_p99_ms": 1000 * percentile(admin["/readyz"], 0.99),
        "analyses_per_s_unloaded": unloaded, "unloaded_before": unloaded_before,
        "unloaded_after": unloaded_after, "analyses_per_s_attacked": loaded["rate"],
        "throughput_ratio": ratio, "non_200": bad0 + loaded["bad"]}
    f = figures["attack"]
    check("soak: under 10,000 slow headers + 1,000 trickling uploads from 20 addresses, "
          "/healthz p99 %.1f ms, /readyz p99 %.1f ms from another address (<= 50 ms)" %
          (f["healthz_p99_ms"], f["readyz_p99_ms"]),
          f["healthz_p99_ms"] <= 50 and f["readyz_p99_ms"] <= 50, f)
    check("soak: analyses under attack at %.0f %% of the unloaded throughput (>= 80 %%), "
          "%d not 200" % (100 * ratio, f["non_200"]), ratio >= 0.8 and f["non_200"] == 0, f)
    srv.stop()


def soak_memory(ecgd, backend, base, values, data, figures):
    """Must-show 3b: every format at the body limit, 8 clients at once, under a 2 GiB budget:
    the server's peak RSS stays within the budget, it is never killed, every client gets an
    answer (200, or 503 memory_busy/overloaded to retry)."""
    budget_mb, limit_mb = 2048, 64
    srv = Server(ecgd, backend, base + ["--memory-budget-mb", str(budget_mb), "--max-body-mb",
                                       str(limit_mb), "--workers", "2"])
    limit = limit_mb << 20
    import array
    block = mit_digital(data, 650000)

    def tiled(unit, cut_after):
        data_ = unit * (limit // len(unit) + 1)
        data_ = data_[:limit]
        return data_[: data_.rfind(cut_after) + 1] if cut_after else data_

    csv = tiled(("\n".join(map(str, block)) + "\n").encode(), b"\n")
    js = tiled((", ".join(map(str, block)) + ", ").encode(), b",")
    js = b'{"fs": 360, "signal": [' + js[: len(js) - 40].rstrip(b", ") + b"]}"
    bodies = {
        "csv": ("text/csv", "fs=360", csv),
        "json": ("application/json", "", js),
        "float32": ("application/octet-stream", "fs=360",
                    tiled(array.array("f", block).tobytes(), None)),
        "int16": ("application/octet-stream", "fs=360&dtype=int16",
                  tiled(array.array("h", block).tobytes(), None)),
    }
    counts = {"200": 0, "503": 0, "other": 0, "lost": 0}
    lock = threading.Lock()
    deadline = time.time() + 60

    def client(i):
        names = list(bodies)
        k = i
        while time.time() < deadline:
            ctype, query, body = bodies[names[k % len(names)]]
            k += 1
            st = request("POST", "/v1/analyze?include=summary" + ("&" + query if query else ""),
                         srv.port, body, {"Content-Type": ctype}, timeout=300)[0]
            with lock:
                key = str(st) if st in (200, 503) else "lost" if st == 0 else "other"
                counts[key] += 1
            if st == 503:
                time.sleep(0.5)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    hwm_mb = srv.hwm_kb() / 1024.0
    alive = srv.alive()
    figures["memory"] = {"budget_mb": budget_mb, "body_limit_mb": limit_mb,
                         "peak_rss_mb": hwm_mb, "alive": alive, **counts}
    check("soak: mixed formats at the body limit, 8 clients for 60 s: peak RSS %.0f MB within "
          "the %d MB budget, server alive, %d answers, %d 503, %d lost, %d other" %
          (hwm_mb, budget_mb, counts["200"], counts["503"], counts["lost"], counts["other"]),
          hwm_mb <= budget_mb and alive and counts["lost"] == 0 and counts["other"] == 0 and
          counts["200"] > 0, figures["memory"])
    srv.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ecgd", default=os.environ.get("ECGD", "build/ecgd"))
    ap.add_argument("--backend", default=os.environ.get("ECGD_TEST_BACKEND", "cpu"))
    ap.add_argument("--data", default=os.environ.get("ECG_SHARED_DATA", "../shared/data"))
    ap.add_argument("--soak", action="store_true")
    args = ap.parse_args()
    if not os.path.exists(os.path.join(args.data, "ucr", "ecg50T.txt")):
        skip("hostile suite", "shared data not found at %s" % args.data)
        return 0
    values = ucr_values(args.data)
    model = os.environ.get("ECGD_TEST_MODEL", "models/default.ecgm")
    tmp = tempfile.mkdtemp(prefix="ecgd-hostile-")
    base = ["--model", "none"]
    if os.path.exists(model):
        os.makedirs(os.path.join(tmp, "models"))
        os.symlink(os.path.abspath(model), os.path.join(tmp, "models", "default.ecgm"))
        base = ["--model-dir", os.path.join(tmp, "models"), "--model", "default"]
    header_timeout = 2
    base_hostile = base + ["--header-timeout-s", str(header_timeout), "--min-upload-kib-s", "1",
                           "--workers", "2"]

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 12000
    want = 16384 if args.soak else want
    if soft < want and hard >= want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        soft = want

    srv = Server(args.ecgd, args.backend, base_hostile)
    srv.header_timeout = header_timeout
    srv.models = os.path.exists(model)
    if not check("server starts with an admin port", srv.port and srv.admin_port, srv.text()[-500:]):
        return 1
    framing(srv)
    meaning(srv, values)
    get_bodies(srv)
    signals(srv)
    if soft >= 4200 + 500:
        must_show_2(srv, values)
    else:
        skip("4,200 slow header connections", "file descriptor limit %d < 4,700 and cannot be "
             "raised" % soft)
    spread_uploads(srv, values)
    header_deadline(srv)
    disconnects(srv, 50 if args.soak else 5)
    log_flood(srv)
    check("the server survived every attack", srv.alive())
    srv.stop()
    token(args.ecgd, args.backend, base)
    memory_budget(args.ecgd, args.backend, base, values)
    unread_answers(args.ecgd, args.backend, base, args.data)
    json_memory(args.ecgd, args.backend, base, args.data, 50)
    out_of_memory(args.ecgd, args.backend, base, args.data, json_body(args.data, 100))
    if args.soak:
        figures = {}
        soak_attack(args.ecgd, args.backend, base, values, figures)
        soak_memory(args.ecgd, args.backend, base, values, args.data, figures)
        srv = Server(args.ecgd, args.backend, base)
        figures["disconnects_worst_s"] = disconnects(srv, 1000)
        srv.stop()
        shutdown(args.ecgd, args.backend, base, values, [0, 1, 25], 20, 64)
        print("# figures " + json.dumps(figures, sort_keys=True))
    else:
        shutdown(args.ecgd, args.backend, base, values, [0, 1], 2, 64)
    print("# %d checks, %d failed" % (hostile_lib.N, hostile_lib.FAILED))
    return 1 if hostile_lib.FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
