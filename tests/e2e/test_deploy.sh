#!/usr/bin/env bash
# test_deploy.sh - the deployment files agree with the server: probe paths are real routes (and
# liveness is one that never depends on the model), ports match, the GPU is requested, the
# termination grace period covers the drain, the environment the manifests set is accepted by the
# real option parser, and a server started with that environment answers every probe path.
#
# Parses YAML with python3-yaml (Debian package); prints `ok N - ...` / `not ok N - ...`.
# Usage: ECGD=build/ecgd tests/e2e/test_deploy.sh   (run from the repository root)
set -u
ECGD=${ECGD:-build/ecgd}
if [ ! -x "$ECGD" ]; then
    echo "not ok 1 - $ECGD is not built"
    exit 1
fi
if ! python3 -c 'import yaml' 2>/dev/null; then
    echo "skip 1 - python3-yaml is not installed (apt-get install python3-yaml)"
    exit 0
fi
tmp=$(mktemp -d)
server_pid=
cleanup() {
    [ -n "$server_pid" ] && kill -KILL "$server_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

"$ECGD" serve --list-routes >"$tmp/routes" || { echo "not ok 1 - ecgd serve --list-routes"; exit 1; }
env -i PATH="$PATH" "$ECGD" serve --print-config >"$tmp/defaults.json" ||
    { echo "not ok 1 - ecgd serve --print-config"; exit 1; }

ECGD="$ECGD" python3 - "$tmp" <<'PYTHON'
import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.request

import yaml

tmp = sys.argv[1]
ecgd = os.environ["ECGD"]
routes = {tuple(l.split()) for l in open(os.path.join(tmp, "routes")) if l.strip()}
get_paths = {p for m, p in routes if m == "GET"}
defaults = json.load(open(os.path.join(tmp, "defaults.json")))
LIVE = {"/healthz", "/v2/health/live"}
READY = {"/readyz", "/v2/health/ready"}

n = 0
failed = 0


def check(desc, cond, detail=""):
    global n, failed
    n += 1
    if cond:
        print("ok %d - %s" % (n, desc))
    else:
        failed += 1
        print("not ok %d - %s" % (n, desc))
        if detail:
            print("# " + str(detail))


def settings_from_env(env):
    """The configuration the real parser makes of an environment (exit status, JSON)."""
    proc = subprocess.run([ecgd, "serve", "--print-config"], env={"PATH": os.environ["PATH"], **env},
                          capture_output=True, text=True)
    return proc.returncode, (json.loads(proc.stdout) if proc.returncode == 0 else proc.stderr)


def load_all(path):
    return [d for d in yaml.safe_load_all(open(path)) if d]


# ---------------------------------------------------------------- Kubernetes
docs = {}
for name in ("deployment", "service", "hpa", "pdb"):
    for d in load_all("deploy/k8s/%s.yaml" % name):
        docs[d["kind"]] = d
check("k8s: Deployment, Service, HorizontalPodAutoscaler and PodDisruptionBudget present",
      {"Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"} <= set(docs))
dep = docs["Deployment"]
pod = dep["spec"]["template"]["spec"]
c = pod["containers"][0]
env = {e["name"]: str(e["value"]) for e in c.get("env", []) if "value" in e}
rc, cfg = settings_from_env(env)
check("k8s: the container's ECGD_* environment is accepted by ecgd serve", rc == 0, cfg)
if rc != 0:
    cfg = defaults
ports = {p.get("name"): p["containerPort"] for p in c["ports"]}
check("k8s: container port 'http' is the server's port (%s)" % cfg["port"],
      ports.get("http") == cfg["port"], ports)


def probe_port(probe):
    port = probe["httpGet"]["port"]
    return ports.get(port) if isinstance(port, str) else port


live = c.get("livenessProbe", {})
ready = c.get("readinessProbe", {})
check("k8s: liveness probe is a liveness route (never the model)",
      live.get("httpGet", {}).get("path") in LIVE & get_paths, live)
check("k8s: readiness probe is a readiness route",
      ready.get("httpGet", {}).get("path") in READY & get_paths, ready)
check("k8s: probes hit the admin listener (ECGD_ADMIN_PORT %s), which clients of the main port "
      "cannot starve" % cfg.get("admin_port"),
      cfg.get("admin_port", -1) > 0 and probe_port(live) == cfg["admin_port"] and
      probe_port(ready) == cfg["admin_port"] and cfg["admin_port"] != cfg["port"])
check("k8s: container port 'admin' is the admin listener",
      ports.get("admin") == cfg.get("admin_port"), ports)
startup = c.get("startupProbe")
check("k8s: startup probe waits for the model (a readiness route: /healthz answers before the "
      "model loads)", startup is not None and startup["httpGet"]["path"] in READY & get_paths, startup)
check("k8s: startup probe allows at least 60 s for a cold start",
      startup is not None and startup.get("periodSeconds", 10) * startup.get("failureThreshold", 3) >= 60)
check("k8s: liveness probe timeout below the period",
      live.get("timeoutSeconds", 1) < live.get("periodSeconds", 10))
res = c.get("resources", {})
check("k8s: requests and limits one nvidia.com/gpu",
      str(res.get("limits", {}).get("nvidia.com/gpu")) == "1" and
      str(res.get("requests", {}).get("nvidia.com/gpu", "1")) == "1", res)


def bytes_of(q):
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti)?", str(q))
    return int(m.group(1)) * {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}[m.group(2)]


check("k8s: cpu and memory requested and limited",
      all(k in res.get("requests", {}) and k in res.get("limits", {}) for k in ("cpu", "memory")))
check("k8s: memory limit holds at least 4 bodies of ECGD_MAX_BODY_MB (%d MiB)" % (cfg["max_body_bytes"] >> 20),
      bytes_of(res["limits"]["memory"]) >= 4 * cfg["max_body_bytes"])
pre_stop = 0
hook = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
if len(hook) == 2 and hook[0] == "sleep":
    pre_stop = int(hook[1])
grace = pod.get("terminationGracePeriodSeconds", 30)
check("k8s: terminationGracePeriodSeconds (%d) >= preStop (%d) + drain (%d) + 2"
      % (grace, pre_stop, cfg["drain_s"]), grace >= pre_stop + cfg["drain_s"] + 2)
check("k8s: runs as non-root", pod.get("securityContext", {}).get("runAsNonRoot") is True and
      pod["securityContext"].get("runAsUser", 0) != 0)
ann = dep["spec"]["template"]["metadata"].get("annotations", {})
check("k8s: Prometheus scrape annotations point at /metrics on the admin port",
      ann.get("prometheus.io/path") in get_paths and ann.get("prometheus.io/path") == "/metrics" and
      int(ann.get("prometheus.io/port", 0)) == cfg["admin_port"])
svc = docs["Service"]
labels = dep["spec"]["template"]["metadata"]["labels"]
check("k8s: Service selects the Deployment's pods",
      all(labels.get(k) == v for k, v in svc["spec"]["selector"].items()))
tp = svc["spec"]["ports"][0]["targetPort"]
check("k8s: Service targets the container's port",
      (ports.get(tp) if isinstance(tp, str) else tp) == cfg["port"])
hpa = docs["HorizontalPodAutoscaler"]["spec"]
check("k8s: HPA scales this Deployment, min <= max",
      hpa["scaleTargetRef"]["kind"] == "Deployment" and
      hpa["scaleTargetRef"]["name"] == dep["metadata"]["name"] and
      1 <= hpa["minReplicas"] <= hpa["maxReplicas"])
check("k8s: Deployment has no replica count fights with the HPA floor",
      dep["spec"].get("replicas", 1) >= hpa["minReplicas"])
pdb = docs["PodDisruptionBudget"]["spec"]
check("k8s: PodDisruptionBudget selects the Deployment's pods",
      all(labels.get(k) == v for k, v in pdb["selector"]["matchLabels"].items()))
min_available = pdb.get("minAvailable")
check("k8s: PodDisruptionBudget keeps a pod serving and still lets a drain proceed "
      "(1 <= minAvailable < the HPA floor, or maxUnavailable >= 1)",
      (isinstance(min_available, int) and 1 <= min_available < hpa["minReplicas"]) or
      (min_available is None and int(pdb.get("maxUnavailable", 0)) >= 1), pdb)

# ---------------------------------------------------------------- docker compose
compose = yaml.safe_load(open("deploy/docker-compose.yml"))["services"]["ecgd"]
cenv = {k: str(v) for k, v in compose.get("environment", {}).items() if "${" not in str(v)}
rc, ccfg = settings_from_env(cenv)
check("compose: environment accepted by ecgd serve", rc == 0, ccfg)
if rc != 0:
    ccfg = defaults
check("compose: publishes the server's port",
      any(str(p).split(":")[-1] == str(ccfg["port"]) for p in compose.get("ports", [])))
devices = compose.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices", [])
check("compose: reserves one NVIDIA GPU",
      any(d.get("driver") == "nvidia" and d.get("count") == 1 and "gpu" in d.get("capabilities", [])
          for d in devices))
test = " ".join(compose.get("healthcheck", {}).get("test", []))
hc_path = re.search(r"https?://[^/\s]+(/[^\s\"]*)", test)
check("compose: healthcheck uses a health route on the server's port",
      hc_path is not None and hc_path.group(1) in (LIVE | READY) & get_paths and
      (":%d/" % ccfg["port"]) in test, test)
m = re.fullmatch(r"(\d+)s", str(compose.get("stop_grace_period", "10s")))
check("compose: stop_grace_period exceeds the drain", m and int(m.group(1)) > ccfg["drain_s"])

# ---------------------------------------------------------------- Dockerfile
text = open("Dockerfile").read()
args = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", text, re.M))
froms = [args.get(f[2:-1], f) if f.startswith("${") else f
         for f in re.findall(r"^FROM\s+(\S+)", text, re.M)]
check("Dockerfile: multi-stage, CUDA devel image to build, CUDA runtime with cuDNN to run",
      len(froms) >= 2 and "cuda" in froms[0] and "devel" in froms[0] and
      "cuda" in froms[-1] and "runtime" in froms[-1] and "cudnn" in froms[-1], froms)
final = text[text.rfind("\nFROM "):]
user = re.findall(r"^USER\s+(\S+)", final, re.M)
check("Dockerfile: runs as a non-root user", user and user[-1].split(":")[0] not in ("root", "0"))
expose = re.findall(r"^EXPOSE\s+(\d+)", final, re.M)
denv = dict(re.findall(r"(ECGD_[A-Z_]+)=(\S+)", final))
rc, dcfg = settings_from_env(denv)
check("Dockerfile: ENV accepted by ecgd serve", rc == 0, dcfg)
if rc != 0:
    dcfg = defaults
check("Dockerfile: EXPOSE is the server's port", expose == [str(dcfg["port"])], expose)
hc = re.search(r"^HEALTHCHECK(?:\\\n|[^\n])*", final, re.M)
hc_path = re.search(r"https?://[^/\s]+(/[^\s\"]*)", hc.group(0)) if hc else None
check("Dockerfile: HEALTHCHECK on a liveness route",
      hc_path is not None and hc_path.group(1) in LIVE & get_paths)
check("Dockerfile: ships models/default.ecgm where the server looks",
      re.search(r"^COPY\s+models/default\.ecgm\s+%s/%s\.ecgm" % (re.escape(dcfg["model_dir"]),
                                                                 re.escape(dcfg["model"])),
                final, re.M) is not None)
check("Dockerfile: STOPSIGNAL SIGTERM (the graceful drain)",
      re.search(r"^STOPSIGNAL\s+SIGTERM", final, re.M) is not None)
images = froms
cuda = [re.search(r"nvidia/cuda:(\d+\.\d+)", i) for i in images]
measured = re.findall(r"CUDA (\d+\.\d+)", open("bench/RESULTS-gpu.md").read())
check("Dockerfile: build and run images on the CUDA version the project is measured with (%s)"
      % (measured[0] if measured else "?"),
      measured and all(m and m.group(1) == measured[0] for m in cuda), images)
nvcc = subprocess.run(["sh", "-c", "nvcc --version 2>/dev/null | grep -o 'release [0-9.]*'"],
                      capture_output=True, text=True).stdout.split()
check("Dockerfile: the same CUDA as the local nvcc (where there is one)",
      not nvcc or all(m and m.group(1) == nvcc[-1] for m in cuda), (nvcc, images))
check("Dockerfile: images named by full tag (no latest), with digest pinning documented",
      all(":" in i and not i.endswith(":latest") for i in images) and
      ("@sha256:" in text) and "imagetools inspect" in text)
build_stage = text[:text.rfind("\nFROM ")]
copies = [(m.start(), m.group(1)) for m in re.finditer(r"^COPY\s+(.*)$", build_stage, re.M)]
runs = [(m.start(), m.group(0)) for m in re.finditer(r"^RUN\s(?:.*\\\n)*.*$", build_stage, re.M)]
copy_all = next((pos for pos, what in copies if what.split()[0] == "."), None)
cuda_run = next((pos for pos, what in runs if "cuda-objects" in what), None)
apt_run = next((pos for pos, what in runs if "apt-get install" in what), None)
check("Dockerfile: layer order caches the packages, then the CUDA objects, then the rest",
      apt_run is not None and cuda_run is not None and copy_all is not None and
      apt_run < min(pos for pos, _ in copies) and cuda_run < copy_all and
      all(what.split()[0] != "." for pos, what in copies if pos < cuda_run), copies)
make_cuda = subprocess.run(["make", "-n", "-B", "CUDA=1", "NVCC=nvcc", "cuda-objects"], capture_output=True,
                           text=True)
check("Makefile: the cuda-objects target the Dockerfile uses exists and builds gpu/*.cu",
      make_cuda.returncode == 0 and ".cu" in make_cuda.stdout, make_cuda.stderr[-300:])
pre_copy = " ".join(what for pos, what in copies if pos < cuda_run)
headers = re.findall(r"\$\(wildcard ([^)]*)\)", re.search(r"^\$\(BUILD\)/%.o: %.cu (.*)$",
                                                           open("Makefile").read(), re.M).group(1))
check("Dockerfile: the CUDA layer copies every header the CUDA objects depend on",
      all(h in pre_copy or h.split("/")[0] + "/ " in pre_copy + " " for h in headers[0].split()),
      (headers, pre_copy))
apt_text = re.search(r"apt-get install[^&]*", build_stage).group(0)
libs = re.findall(r"-l(\w+)", re.search(r"^LDLIBS\s*:=(.*)$", open("Makefile").read(), re.M).group(1))
dev_of = {"microhttpd": "libmicrohttpd-dev", "cjson": "libcjson-dev", "fftw3f": "libfftw3-dev",
          "fftw3f_threads": "libfftw3-dev", "edf": "libedf-dev", "z": "zlib1g-dev",
          "zstd": "libzstd-dev", "crypto": "libssl-dev"}
missing = [l for l in libs if l in dev_of and dev_of[l] not in apt_text] + \
          [l for l in libs if l not in dev_of and l not in ("m", "pthread")]
check("Dockerfile: installs the -dev package of every library the Makefile links", not missing,
      missing)
ignore = [l.strip() for l in open(".dockerignore") if l.strip() and not l.startswith("#")]
check(".dockerignore keeps build outputs, node_modules and .git out of the context",
      all(any(p == x or p.rstrip("/") == x for p in ignore) for x in ("build", "node_modules", ".git")),
      ignore)

# ---------------------------------------------------------------- systemd
unit = open("deploy/ecgd.service").read()
senv = dict(re.findall(r"^Environment=(ECGD_[A-Z_]+)=(\S+)", unit, re.M))
rc, scfg = settings_from_env(senv)
check("systemd: Environment= accepted by ecgd serve", rc == 0, scfg)
if rc != 0:
    scfg = defaults
exec_start = re.search(r"^ExecStart=(.*)$", unit, re.M)
check("systemd: ExecStart runs `ecgd serve`",
      exec_start is not None and shlex.split(exec_start.group(1))[1:2] == ["serve"])
stop = re.search(r"^TimeoutStopSec=(\d+)", unit, re.M)
check("systemd: TimeoutStopSec exceeds the drain",
      stop is not None and int(stop.group(1)) > scfg["drain_s"])
check("systemd: SIGTERM, non-root user",
      re.search(r"^KillSignal=SIGTERM", unit, re.M) is not None and
      re.search(r"^User=(?!root)\S+", unit, re.M) is not None)

# ---------------------------------------------------------------- the probes answer
# A server started with the Deployment's environment (port and model made local) answers every
# path the manifests name.
run_env = {"PATH": os.environ["PATH"], **env, "ECGD_PORT": "0", "ECGD_ADMIN_PORT": "0",
           "ECGD_BIND": "127.0.0.1",
           "ECGD_BACKEND": "cpu", "ECGD_MODEL": "none", "ECGD_MODEL_DIR": "models",
           "ECGD_WORKERS": "1"}
log_path = os.path.join(tmp, "server.log")
server = subprocess.Popen([ecgd, "serve"], env=run_env, stderr=open(log_path, "w"))
port = None
for _ in range(100):
    for line in open(log_path):
        if '"event":"listening"' in line:
            port = json.loads(line)["admin_port"]
    if port or server.poll() is not None:
        break
    time.sleep(0.05)
paths = [live["httpGet"]["path"], ready["httpGet"]["path"], ann.get("prometheus.io/path")]
codes = []
if port:
    for path in paths:
        for _ in range(50):
            try:
                codes.append(urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path),
                                                    timeout=5).status)
                break
            except Exception:
                time.sleep(0.1)
        else:
            codes.append(None)
server.terminate()
try:
    rc = server.wait(timeout=30)
except subprocess.TimeoutExpired:
    server.kill()
    rc = None
check("probe and metrics paths of the manifests answer 200 on a real server's admin port",
      codes == [200, 200, 200],
      list(zip(paths, codes)))
check("that server exits 0 on SIGTERM", rc == 0, rc)

print("# %d tests, %d failed" % (n, failed))
sys.exit(1 if failed else 0)
PYTHON
