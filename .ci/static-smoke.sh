#!/usr/bin/env bash
# Smoke test of the static binary (.ci/static-build.sh), as a user without a Rust toolchain
# would run it: it is static, it starts, it serves, and it resolves host names.
#
#   .ci/static-smoke.sh [path/to/gantry]
#
# Every listener binds 127.0.0.1:0; the ports are read back from the start-up output. The
# administrator token is the one the first start generates into the data dir. One event goes
# in (POST /deviceEvents) and comes out (GET /devices/{id}/events). `gantry healthcheck` is
# asked by address and by the name `localhost` (getaddrinfo in a static glibc binary). With
# GANTRY_SMOKE_POSTGRES_URL (postgres://...@localhost:5432/...) and GANTRY_SMOKE_BROKER_URL
# (mqtt://localhost:1883) the binary also starts on that database and that broker, each
# reached by host name.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
binary=${1:-$root/target/x86_64-unknown-linux-gnu/release/gantry}
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "static smoke: $*" >&2; exit 1; }

if ! command -v file >/dev/null 2>&1 || ! command -v readelf >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq file binutils >/dev/null
fi

echo "--- is it static?"
file "$binary"
file "$binary" | grep -q 'static-pie linked\|statically linked' || fail "not statically linked"
# ldd of a static-pie binary either says so or (older ldd) exits non-zero: no shared library.
if ldd_out=$(ldd "$binary" 2>&1); then
  echo "$ldd_out"
  echo "$ldd_out" | grep -q '=>' && fail "ldd lists shared libraries"
else
  echo "ldd: $ldd_out"
fi
readelf -d "$binary" | grep -q NEEDED && fail "the binary has NEEDED entries"
"$binary" --version

# Starts `gantry serve` on port 0 everywhere; sets $base to its REST URL.
start() {
  local data=$1; shift
  env -i PATH=/usr/bin:/bin "$@" \
    GANTRY_DATA_DIR="$data" GANTRY_HTTP_ADDR=127.0.0.1:0 GANTRY_MQTT_ADDR=127.0.0.1:0 \
    GANTRY_MQTT_WS_ADDR=127.0.0.1:0 GANTRY_MQTTS_ADDR=127.0.0.1:0 GANTRY_MQTT_WSS_ADDR=127.0.0.1:0 \
    GANTRY_HTTPS_ADDR=127.0.0.1:0 \
    "$binary" serve >"$data.out" 2>"$data.err" &
  pids+=($!)
  base=
  for _ in $(seq 1 300); do
    base=$(sed -n 's/^gantry listening on //p' "$data.out" | head -n 1)
    [ -n "$base" ] && return 0
    kill -0 "${pids[-1]}" 2>/dev/null || { cat "$data.out" "$data.err"; fail "the server exited"; }
    sleep 0.1
  done
  cat "$data.out" "$data.err"; fail "no 'gantry listening on' line"
}

json() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }

echo "--- embedded default (SQLite)"
start "$work/data"
echo "REST on $base"
token=$(cat "$work/data/admin-token")
[ -n "$token" ] || fail "no generated admin token"
curl -sf "$base/healthz" >/dev/null || fail "GET /healthz"
port=${base##*:}
"$binary" healthcheck --url "$base/healthz"
GANTRY_HTTP_ADDR="0.0.0.0:$port" "$binary" healthcheck
"$binary" healthcheck --url "http://localhost:$port/healthz" || fail "the name localhost does not resolve"
if "$binary" healthcheck --url "http://127.0.0.1:1/healthz" 2>/dev/null; then fail "healthcheck of a closed port passed"; fi

H=(-H "Authorization: Bearer $token" -H "Content-Type: application/json")
api=$base/api/v1
curl -sf "$api/projects" -H "Authorization: Bearer wrong" >/dev/null && fail "a wrong token was taken"
project=$(curl -sf "${H[@]}" "$api/projects" -d '{"name": "smoke"}' | json '["result"]["id"]')
model=$(curl -sf "${H[@]}" "$api/deviceModels" -d '{"name": "smoke", "attributesMap":
  {"load": {"name": "Load", "code": "load", "dataType": "Float"}}}' | json '["result"]["id"]')
device=$(curl -sf "${H[@]}" "$api/devices" -d "{\"deviceName\": \"crane\", \"projectId\": \"$project\",
  \"modelId\": \"$model\"}" | json '["result"]["id"]')
curl -sf "${H[@]}" "$api/deviceEvents" -d "{\"deviceId\": \"$device\", \"attributeCode\": \"load\",
  \"attributeData\": 3.5, \"deviceTime\": \"2024-05-01T08:00:00.000+0800\"}" | json '["returnCode"]' | grep -qx 0 \
  || fail "POST /deviceEvents"
events=$(curl -sf "${H[@]}" "$api/devices/$device/events?startDate=2024-05-01T00:00:00.000%2B0800&endDate=2024-05-02T00:00:00.000%2B0800")
echo "$events" | json '["result"]["results"][0]["attributeData"]' | grep -qx 3.5 || fail "the event did not come back: $events"
echo "event in and out: ok"

if [ -n "${GANTRY_SMOKE_POSTGRES_URL:-}" ]; then
  echo "--- PostgreSQL reached by host name: $GANTRY_SMOKE_POSTGRES_URL"
  start "$work/pg" GANTRY_DATABASE_URL="$GANTRY_SMOKE_POSTGRES_URL"
  curl -sf "$base/healthz" >/dev/null || fail "GET /healthz on PostgreSQL"
  echo "started on PostgreSQL: ok"
fi
if [ -n "${GANTRY_SMOKE_BROKER_URL:-}" ]; then
  echo "--- an external broker reached by host name: $GANTRY_SMOKE_BROKER_URL"
  start "$work/ext" GANTRY_MQTT_BROKER_URL="$GANTRY_SMOKE_BROKER_URL" GANTRY_TOPIC_PREFIX="smoke-$$"
  curl -sf "$base/healthz" >/dev/null || fail "GET /healthz with the external broker"
  echo "started on the external broker: ok"
fi
echo "static smoke: ok"
