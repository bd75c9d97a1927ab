#!/usr/bin/env python3
"""Compares the OpenAPI document a running server serves with what the server really has, both
ways (python3 standard library only). Used by tests/e2e/test_openapi.sh.

  openapi_check.py DOC ROUTES SERVICE_MD SRC_ROOT

DOC         /openapi.json as the server sent it
ROUTES      `ecgd serve --list-routes`: "METHOD PATH" lines, each followed by indented
            "  query NAME", "  content-type TYPE", "  content-encoding CODING" and "  accept TYPE"
            lines taken from the tables the request checks use
SERVICE_MD  docs/SERVICE.md: its error table must list the same codes
SRC_ROOT    the repository: the error codes are every code literal the server's sources pass to
            ecg_fail(), svc_answer_error() or REFUSE() (engine/, models/, service/, gpu/), less
            STARTUP_ONLY below, which never reach an HTTP answer

Checks, each printed as "ok - ..." or "not ok - ...":
  - methods and paths: served == documented (HEAD included);
  - per operation: query parameters, request content types, Content-Encoding values and
    Accept values served == documented;
  - every operation documents 405 (HEAD: a 4XX range) and every token route 401;
  - error codes: source == the enum of Error.code == docs/SERVICE.md's error table;
  - every $ref resolves.
Exit status 0 when every check passed.
"""
import json
import os
import re
import sys

# Codes that exist in the sources but are never sent over HTTP, with why.
STARTUP_ONLY = {
    "bad_bind": "--bind at start: the process exits 1",
    "listen_failed": "the port at start: the process exits 1",
    "model_dir": "the model directory at start: the process exits 1",
    "too_many_models": "logged when the model directory holds more than 32 models",
    "thread_create": "the worker pool at start",
    "openapi_part": "the OpenAPI parts (service/openapi/) at start: the process exits 1",
    "diverged": "`ecgd train` only",
    "model_checksum": "model files: logged at start or reload, the file is skipped",
    "model_dims": "model files: logged at start or reload",
    "model_flags": "model files: logged at start or reload",
    "model_io": "model files: logged at start or reload",
    "model_magic": "model files: logged at start or reload",
    "model_too_large": "model files: logged at start or reload",
    "model_trailing": "model files: logged at start or reload",
    "model_truncated": "model files: logged at start or reload",
    "model_value": "model files: logged at start or reload",
    "model_version": "model files: logged at start or reload",
}

CALL = re.compile(r'\b(?:ecg_fail|svc_answer_error|REFUSE|read_check_rate)\(\s*'
                  r'(?:[^,"()]|\([^()]*\))+,\s*((?:[^,"()]|\([^()]*\))+),\s*'
                  r'((?:[^,"()]|"[^"]*")+),', re.S)
STATUS = re.compile(r'\b(ECG_ERR_[A-Z_]+|MHD_HTTP_[A-Z_]+)')
# Codes whose HTTP status is chosen where they are answered, not where they are made.
SENT_AS = {"default_model_missing": {409}}  # route_models.c: a reload's NOT_FOUND is a conflict
HTTP = {"MHD_HTTP_BAD_REQUEST": 400, "MHD_HTTP_UNAUTHORIZED": 401, "MHD_HTTP_FORBIDDEN": 403,
        "MHD_HTTP_CONFLICT": 409, "MHD_HTTP_NOT_FOUND": 404,
        "MHD_HTTP_METHOD_NOT_ALLOWED": 405, "MHD_HTTP_CONTENT_TOO_LARGE": 413,
        "MHD_HTTP_UNSUPPORTED_MEDIA_TYPE": 415, "MHD_HTTP_UNPROCESSABLE_CONTENT": 422,
        "MHD_HTTP_INTERNAL_SERVER_ERROR": 500, "MHD_HTTP_NOT_IMPLEMENTED": 501,
        "MHD_HTTP_SERVICE_UNAVAILABLE": 503}
STRING = re.compile(r'"([a-z][a-z0-9_]*)"')
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")

failures = 0


def check(desc, served, documented):
    """Prints ok when the two sets are equal, else what each side lacks."""
    global failures
    if served == documented:
        print("ok - %s (%d)" % (desc, len(served)))
        return
    failures += 1
    print("not ok - %s" % desc)
    for x in sorted(served - documented):
        print("#   served but not documented: %s" % (x,))
    for x in sorted(documented - served):
        print("#   documented but not served: %s" % (x,))


def served_api(routes_path):
    ops = {}
    current = None
    for line in open(routes_path):
        if not line.strip():
            continue
        if line[0].isspace():
            kind, value = line.split(None, 1)
            for op in current:
                ops[op].setdefault(kind, set()).add(value.strip())
        else:
            method, path = line.split()
            # details follow the last method line of a route and apply to all its methods
            if current and current[0][1] != path:
                current = []
            current = (current or []) + [(method, path)]
            ops[(method, path)] = {}
    return ops


def resolve(doc, node):
    while isinstance(node, dict) and "$ref" in node:
        target = doc
        for part in node["$ref"][2:].split("/"):
            target = target[part]
        node = target
    return node


def documented_api(doc):
    ops = {}
    for path, item in doc["paths"].items():
        for method in METHODS:
            if method not in item:
                continue
            op = item[method]
            details = {}
            for p in item.get("parameters", []) + op.get("parameters", []):
                p = resolve(doc, p)
                if p["in"] == "query":
                    details.setdefault("query", set()).add(p["name"])
                elif p["in"] == "header" and p["name"].lower() == "content-encoding":
                    details["content-encoding"] = set(p["schema"]["enum"])
            body = resolve(doc, op.get("requestBody", {}))
            if body:
                details["content-type"] = set(body["content"])
            accepts = set()
            for status, resp in op.get("responses", {}).items():
                if status.startswith("2"):
                    accepts |= set(resolve(doc, resp).get("content", {}))
            if len(accepts) > 1:  # one answer type needs no Accept
                details["accept"] = accepts
            ops[(method.upper(), path)] = (details, op)
    return ops


def http_of_status(root):
    """ECG_ERR_* -> HTTP status, from svc_http_status()'s switch in service/http.c."""
    text = open(os.path.join(root, "service", "http.c")).read()
    body = text[text.index("unsigned svc_http_status("):]
    body = body[:body.index("\n}\n")]
    mapping, pending = {}, []
    for m in re.finditer(r"case (ECG_[A-Z_]+):|return (MHD_HTTP_[A-Z_]+);", body):
        if m.group(1):
            pending.append(m.group(1))
        else:
            for name in pending:
                mapping[name] = HTTP.get(m.group(2), 200)
            pending = []
    return mapping


def source_codes(root):
    """{code: {HTTP statuses its call sites give}}."""
    to_http = dict(HTTP, **http_of_status(root))
    codes = {}
    for sub, exts in (("engine", (".c", ".h")), ("models", (".c",)), ("service", (".c",)),
                      ("gpu", (".cu", ".h", ".cuh"))):
        for dirpath, _, files in os.walk(os.path.join(root, sub)):
            for name in files:
                if name.endswith(exts) and "tools" not in dirpath:
                    text = open(os.path.join(dirpath, name)).read()
                    for m in CALL.finditer(text):
                        statuses = {to_http[x] for x in STATUS.findall(m.group(1)) if x in to_http}
                        for code in STRING.findall(m.group(2)):
                            codes.setdefault(code, set()).update(statuses)
    for code, statuses in SENT_AS.items():
        if code in codes:
            codes[code] = set(statuses)
    return codes


def table_codes(service_md):
    """{code: {statuses of the rows that list it}} from docs/SERVICE.md's error table."""
    text = open(service_md).read()
    start = text.index("| status | when | codes |")
    codes = {}
    for row in text[start:text.index("\n\n", start)].split("\n")[2:]:
        status = int(re.match(r"\| (\d+)", row).group(1))
        for code in re.findall(r"`([a-z][a-z0-9_]*)`", row.split("|")[3]):
            codes.setdefault(code, set()).add(status)
    return codes


def main(doc_path, routes_path, service_md, root):
    doc = json.load(open(doc_path))
    served = served_api(routes_path)
    documented = documented_api(doc)
    check("methods and paths", set(served), set(documented))
    for key in sorted(set(served) & set(documented)):
        details, op = documented[key]
        for kind in ("query", "content-type", "content-encoding", "accept"):
            check("%s %s: %s" % (key[0], key[1], kind), served[key].get(kind, set()),
                  details.get(kind, set()))
        responses = set(op.get("responses", {}))
        wanted = {"4XX"} if key[0] == "HEAD" else {"405"}
        if key[1].startswith("/v1/") and key[0] != "HEAD":
            wanted.add("401")
        check("%s %s: documents %s" % (key[0], key[1], "/".join(sorted(wanted))),
              wanted & responses, wanted)

    code_schema = doc["components"]["schemas"]["Error"]["properties"]["error"]["properties"]
    enum = set(code_schema["code"].get("enum", []))
    src = source_codes(root)
    stale = set(STARTUP_ONLY) - set(src)
    check("every startup-only code still exists in the sources", stale, set())
    check("error codes: sources == Error.code enum", set(src) - set(STARTUP_ONLY), enum)
    table = table_codes(service_md)
    check("error codes: Error.code enum == docs/SERVICE.md table", enum, set(table))
    wrong_row = {"%s in %s, sent as %s" % (c, sorted(table[c]), sorted(src.get(c, ())))
                 for c in table if not table[c] <= src.get(c, set())}
    check("docs/SERVICE.md lists each code under a status it is sent with", wrong_row, set())

    text = json.dumps(doc)
    unresolved = set()
    for ref in set(re.findall(r'"\$ref": "#/([^"]+)"', text)):
        try:
            resolve(doc, {"$ref": "#/" + ref})
        except (KeyError, TypeError):
            unresolved.add(ref)
    check("every $ref resolves", unresolved, set())
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
