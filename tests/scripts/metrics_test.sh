#!/usr/bin/env bash
# GET /metrics of every node of a real 3-node cluster (scripts/cluster) passes `promtool check metrics`
# (Debian's prometheus package) after traffic that touches every family: allowed and denied checks on
# every node (so most are forwarded to another owner), a batch POST, a Gubernator HTTP call, a bad request,
# a gRPC HealthCheck (python3-grpcio) and a replicated write. Also asserts the families an operator looks
# for first are there and that HEAD /metrics answers 200 with no body.
#
#   RINGLIMITD=build/release/node/server/ringlimitd tests/scripts/metrics_test.sh
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
for tool in promtool /usr/bin/python3; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool is missing (scripts/bootstrap installs it)" >&2; exit 1; }
done
# Its own cluster directory and port range (the other script tests take theirs from 10000 and 20000 up).
source "$root/tests/scripts/ports.sh"
script_cluster_env "$root/scripts/cluster" 1100 metrics-test
fail() { echo "FAIL: $*" >&2; exit 1; }

"$root/scripts/cluster" up 3 >"$work/up.log" 2>&1 || fail "scripts/cluster up 3: $(tail -5 "$work/up.log")"
http() { echo $((RINGLIMIT_BASE_PORT + $1)); }
grpc() { echo $((RINGLIMIT_BASE_PORT + 200 + $1)); }

# Traffic through every node: 20 keys of limit 3, each checked on every node (most forwarded to another
# owner), m1 and m2 past their limit.
for i in 1 2 3; do
  for k in $(seq 1 20); do
    curl -s -o /dev/null "http://127.0.0.1:$(http "$i")/v1/check?key=m$k&limit=3&window_ms=60000&algorithm=token_bucket"
  done
  for k in 1 2; do
    curl -s -o /dev/null "http://127.0.0.1:$(http "$i")/v1/check?key=m$k&limit=3&window_ms=60000&algorithm=token_bucket"
  done
  curl -s -o /dev/null -H 'Content-Type: application/json' \
    -d '{"checks":[{"key":"b1","limit":5,"window_ms":1000},{"key":"b2","limit":5,"window_ms":1000}]}' \
    "http://127.0.0.1:$(http "$i")/v1/check"
  curl -s -o /dev/null -H 'Content-Type: application/json' \
    -d '{"requests":[{"name":"g","unique_key":"u1","hits":1,"limit":5,"duration":60000}]}' \
    "http://127.0.0.1:$(http "$i")/v1/GetRateLimits"
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$(http "$i")/v1/check?limit=-1")
  [[ "$code" == 400 ]] || fail "a bad check on n$i answered $code, not 400"
  /usr/bin/python3 - "$(grpc "$i")" <<'PY' 2>"$work/grpc.err" || fail "gRPC HealthCheck on n$i: $(tail -3 "$work/grpc.err")"
import sys, grpc
channel = grpc.insecure_channel(f"127.0.0.1:{sys.argv[1]}")
assert b"healthy" in channel.unary_unary("/pb.gubernator.V1/HealthCheck")(b"", timeout=10)
PY
done

families=(ringlimit_http_request_duration_seconds ringlimit_forward_duration_seconds
  ringlimit_replication_batch_lag_seconds ringlimit_build_info process_resident_memory_bytes process_open_fds
  ringlimit_http_connections ringlimit_grpc_requests_total ringlimit_grpc_duration_seconds
  ringlimit_forward_checks_total ringlimit_state_bytes)
for i in 1 2 3; do
  url="http://127.0.0.1:$(http "$i")/metrics"
  curl -sf "$url" >"$work/metrics.$i" || fail "GET /metrics on n$i"
  promtool check metrics <"$work/metrics.$i" >"$work/promtool.$i" 2>&1 ||
    fail "promtool check metrics on n$i: $(head -20 "$work/promtool.$i")"
  for family in "${families[@]}"; do
    grep -q "^# TYPE $family " "$work/metrics.$i" || fail "n$i: no $family family in /metrics"
  done
  out=$(curl -s -I -w '%{http_code} %{size_download}' -o /dev/null "$url")
  [[ "$out" == "200 0" ]] || fail "HEAD /metrics on n$i: $out"
done
# Forwarded checks were counted somewhere (20 keys over 3 owners: most asked nodes do not own the key).
forwarded=$(cat "$work"/metrics.* | awk '/^ringlimit_forward_checks_total/ { s += $2 } END { print s + 0 }')
((forwarded > 0)) || fail "no forwarded check counted"
echo "PASS: /metrics of 3 nodes passes promtool check metrics ($(wc -l <"$work/metrics.1") lines on n1)"
