#!/usr/bin/env bash
# test_openapi.sh - /openapi.json, fetched from the running server, is valid and says what the
# server really does:
#   - `redocly lint` (npm @redocly/cli, rule set in redocly.yaml: Redocly's "recommended",
#     unchanged) reports 0 errors and 0 warnings;
#   - @seriousme/openapi-schema-validator (the OpenAPI 3.1 JSON Schema) accepts it;
#   - openapi_check.py: methods, paths, query options, content types, codings and Accept types
#     of `ecgd serve --list-routes` (printed from the tables the request checks use) match the
#     document both ways; every error code of the sources is in Error.code and in docs/SERVICE.md,
#     under a status it is sent with;
#   - the live server agrees: every documented method of every path is answered (not 404/405),
#     every documented content type of POST /v1/analyze is accepted (an empty body: 400
#     empty_body, not 415), and an undocumented one is refused 415.
# The npm tools come from package.json/package-lock.json (scripts/install-deps.sh: npm ci).
# Usage: ECGD=build/ecgd tests/e2e/test_openapi.sh   (run from the repository root)
set -u
ECGD=${ECGD:-build/ecgd}
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib.sh"

require_ecgd
if [ ! -x node_modules/.bin/redocly ] || [ ! -x node_modules/.bin/validate-api ]; then
    echo "not ok 1 - npm tools missing: run scripts/install-deps.sh (npm ci)"
    exit 1
fi
if ! start_server "$tmp/server.log" --model-dir models --model default --workers 2; then
    echo "not ok 1 - the server starts"; sed 's/^/# /' "$tmp/server.log"; exit 1
fi
ok "server ready on port $PORT"

check "GET /openapi.json answers 200" test "$(req GET /openapi.json)" = 200
cp "$tmp/body" "$tmp/openapi.json"
"$ECGD" serve --list-routes >"$tmp/routes"

node_modules/.bin/redocly lint --config redocly.yaml --format=stylish "$tmp/openapi.json" \
    >"$tmp/lint" 2>&1
lint_rc=$?
summary=$(grep -E '^(error|warning) ' "$tmp/lint"; grep -E 'Validation failed|valid' "$tmp/lint")
if [ $lint_rc = 0 ] && ! grep -qE '^ *[0-9]+:[0-9]+ +(error|warning)' "$tmp/lint"; then
    ok "redocly lint (recommended rules): 0 errors, 0 warnings"
else
    not_ok "redocly lint (recommended rules): 0 errors, 0 warnings"
    grep -E '(error|warning)' "$tmp/lint" | head -30 | sed 's/^/# /'
    echo "# $summary"
fi
node_modules/.bin/validate-api "$tmp/openapi.json" >"$tmp/validate" 2>&1
check "@seriousme/openapi-schema-validator accepts it" grep -q '"valid": true' "$tmp/validate" ||
    sed 's/^/# /' "$tmp/validate" | head -30

if python3 "$HERE/openapi_check.py" "$tmp/openapi.json" "$tmp/routes" docs/SERVICE.md . \
        >"$tmp/check"; then
    ok "routes, methods, options, content types and error codes match both ways ($(grep -c '^ok' "$tmp/check") checks)"
else
    not_ok "routes, methods, options, content types and error codes match both ways"
    grep -v '^ok' "$tmp/check" | sed 's/^/# /'
fi

# The live server answers every documented operation (model routes with the served model,
# analyses routes with a kept analysis: DELETE with one of its own, a dashboard file).
kept_id() {
    curl -s -X POST -H 'Content-Type: text/csv' --data-binary @tests/data/mitdb_100s.csv \
        "http://127.0.0.1:$PORT/v1/analyses?fs=360" | python3 -c 'import json, sys; print(json.load(sys.stdin)["id"])'
}
id=$(kept_id)
id_deleted=$(kept_id)
bad=""
while read -r method path; do
    url=${path//\{name\}/default}
    url=${url//\{k\}/0}
    url=${url//\{file\}/app.js}
    if [ "$method" = DELETE ]; then url=${url//\{id\}/$id_deleted}; else url=${url//\{id\}/$id}; fi
    args=()
    [ "$method" = HEAD ] && args=(-I)
    [ "$method" = POST ] && args=(-H 'Content-Type: application/json' --data-binary '{}')
    code=$(curl -s -o /dev/null -w '%{http_code}' -X "$method" "${args[@]}" \
           "http://127.0.0.1:$PORT$url")
    case $code in 404|405|000) bad="$bad $method:$path:$code" ;; esac
done < <(python3 -c '
import json, sys
doc = json.load(open(sys.argv[1]))
for path, item in doc["paths"].items():
    for m in ("get", "head", "post", "put", "delete", "patch"):
        if m in item:
            print(m.upper(), path)' "$tmp/openapi.json")
check "every documented operation is served (none 404 or 405)${bad:+:$bad}" test -z "$bad"

bad=""
for type in $(python3 -c '
import json, sys
doc = json.load(open(sys.argv[1]))
print(" ".join(doc["paths"]["/v1/analyze"]["post"]["requestBody"]["content"]))' "$tmp/openapi.json"); do
    code=$(req POST "/v1/analyze?fs=360" -H "Content-Type: $type" --data-binary '')
    [ "$code" = 400 ] && is_error 400 empty_body >/dev/null || bad="$bad $type:$code"
done
check "every documented content type of /v1/analyze is accepted${bad:+:$bad}" test -z "$bad"
code=$(req POST "/v1/analyze?fs=360" -H "Content-Type: image/png" --data-binary 'x')
check "an undocumented content type is refused 415" is_error 415 unsupported_media_type

echo "# $n checks, $failures failed"
[ "$failures" -eq 0 ]
