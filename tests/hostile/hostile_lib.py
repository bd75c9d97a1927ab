"""What the hostile-client suite (hostile.py) is built on: TAP results, the server under attack
(`ecgd serve` on 127.0.0.1 and free ports, its log, metrics and sanitizer reports), raw HTTP over
sockets (any bytes, any source address, how the connection ended), and the recordings the
attacks send. Python 3 standard library only.

The results are counted here (N checks, FAILED of them failed): hostile.py reads them at the end.
"""
import json
import os
import re
import resource
import signal
import socket
import subprocess
import tempfile
import time


N = 0
FAILED = 0


def ok(desc):
    global N
    N += 1
    print("ok %d - %s" % (N, desc), flush=True)


def not_ok(desc, detail=""):
    global N, FAILED
    N += 1
    FAILED += 1
    print("not ok %d - %s" % (N, desc), flush=True)
    if detail:
        for line in str(detail).splitlines()[:6]:
            print("#   " + line[:300], flush=True)


def skip(desc, why):
    global N
    N += 1
    print("skip %d - %s (%s)" % (N, desc, why), flush=True)


def check(desc, cond, detail=""):
    (ok if cond else lambda d: not_ok(d, detail))(desc)
    return cond


# ------------------------------------------------------------------ the server

class Server:
    def __init__(self, ecgd, backend, args, env=None, address_space_mb=0):
        self.log = tempfile.NamedTemporaryFile(prefix="ecgd-hostile-", suffix=".log", delete=False)
        full_env = dict(os.environ)
        full_env.update(env or {})
        cmd = [ecgd, "serve", "--bind", "127.0.0.1", "--port", "0", "--admin-port", "0",
               "--backend", backend] + args
        def limit():
            if address_space_mb:
                size = address_space_mb << 20
                resource.setrlimit(resource.RLIMIT_AS, (size, size))
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log, env=full_env,
                                     preexec_fn=limit)
        self.port = self.admin_port = None
        deadline = time.time() + 60
        while time.time() < deadline and self.port is None:
            text = self.text()
            m = re.search(r'"event":"listening".*?"port":(\d+),"admin_port":(\d+)', text)
            if m:
                self.port, self.admin_port = int(m.group(1)), int(m.group(2))
            elif self.proc.poll() is not None:
                break
            else:
                time.sleep(0.05)
        while time.time() < deadline and '"event":"ready"' not in self.text():
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)

    def text(self):
        with open(self.log.name, "r", errors="replace") as f:
            return f.read()

    def alive(self):
        return self.proc.poll() is None

    def status_kb(self, field):
        """A memory figure of /proc/PID/status (VmHWM, VmRSS...) in kB."""
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        return 0

    def hwm_kb(self):
        return self.status_kb("VmHWM")

    def metric(self, name, port=None):
        status, _, body = request("GET", "/metrics", port=port or self.admin_port)
        for line in body.decode(errors="replace").splitlines():
            if line.startswith(name + " "):
                return float(line.split()[-1])
        return None

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        text = self.text()
        reports = [l for l in text.splitlines() if "Sanitizer" in l or "runtime error:" in l]
        check("no sanitizer report from this server", not reports, "\n".join(reports[:5]))
        os.unlink(self.log.name)
        return self.proc.returncode


# ------------------------------------------------------------------ raw HTTP

def connect(port, source="127.0.0.1", timeout=10):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((source, 0))
    s.settimeout(timeout)
    s.connect(("127.0.0.1", port))
    return s


def read_all(s, timeout=10):
    """Everything until the server closes (or timeout): bytes, and how it ended."""
    s.settimeout(timeout)
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return data, "eof"
            data += chunk
    except socket.timeout:
        return data, "timeout"
    except (ConnectionResetError, BrokenPipeError):
        return data, "reset"


def parse_responses(data):
    """The responses in data, as (status, headers dict, body) tuples."""
    out = []
    while data.startswith(b"HTTP/"):
        head, sep, rest = data.partition(b"\r\n\r\n")
        if not sep:
            break
        lines = head.decode(errors="replace").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        length = int(headers.get("content-length", "0"))
        out.append((status, headers, rest[:length]))
        data = rest[length:]
    return out


def raw(port, data, source="127.0.0.1", timeout=10):
    s = connect(port, source, timeout)
    try:
        s.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass
    got, how = read_all(s, timeout)
    s.close()
    return parse_responses(got), how, got


def request(method, path, port, body=b"", headers=None, source="127.0.0.1", timeout=30):
    head = "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" % (method, path)
    for k, v in (headers or {}).items():
        head += "%s: %s\r\n" % (k, v)
    if body or method == "POST":
        head += "Content-Length: %d\r\n" % len(body)
    responses, _, _ = raw(port, head.encode() + b"\r\n" + body, source, timeout)
    if not responses:
        return 0, {}, b""
    return responses[0]


def error_code(body):
    try:
        return json.loads(body)["error"]["code"]
    except Exception:
        return None


def expect(desc, got, status, code=None):
    st, headers, body = got
    cond = st == status and (code is None or error_code(body) == code)
    check("%s (%d%s)" % (desc, status, " " + code if code else ""), cond,
          "got %s %s" % (st, body[:200]))
    return cond


# ------------------------------------------------------------------ fixtures

def ucr_values(data):
    path = os.path.join(data, "ucr", "ecg50T.txt")
    with open(path) as f:
        return [float(line) for line in f if line.strip()]


def csv_body(values, n):
    reps = n // len(values) + 1
    return ("\n".join("%g" % v for v in (values * reps)[:n]) + "\n").encode()


def mit_digital(data, n):
    raw_bytes = open(os.path.join(data, "mitdb", "101.dat"), "rb").read()
    out = []
    for i in range(0, len(raw_bytes) - 2, 3):
        v = raw_bytes[i] | ((raw_bytes[i + 1] & 0x0F) << 8)
        out.append(v - 4096 if v > 2047 else v)
    reps = n // len(out) + 1
    return (out * reps)[:n]
