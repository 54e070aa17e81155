#!/usr/bin/env bash
# GET /metrics of every node of a real 3-node cluster (scripts/cluster, with --data-dir, --policies,
# --rls-config and --max-metric-names 5) passes `promtool check metrics` (Debian's prometheus package) after
# traffic that touches every family: allowed and denied checks on every node (so most are forwarded to
# another owner), a batch POST, 40 distinct inline limit names, a policy, a Gubernator HTTP call sent with
# curl's default form content type, a bad request, gRPC HealthCheck and ShouldRateLimit calls
# (python3-grpcio), a replicated write, a SIGHUP with a broken policies file. Asserts the new families'
# values (issue 37: write-back, config reloads, per-name decisions capped at 5 names + "other"), that
# every metric examples/grafana/ringlimit.json and examples/prometheus/alerts.yaml name exists on a live
# node, that docs/operations.md lists every family once and every family served here, and that HEAD
# /metrics answers 200 with no body.
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

# The policies file is a copy each node reads: a SIGHUP after breaking it must count a failed reload.
cp "$root/examples/policies.json" "$work/policies.json"
export RINGLIMIT_NODE_FLAGS="$RINGLIMIT_NODE_FLAGS --policies $work/policies.json --rls-config $root/examples/rls-config.yaml --max-metric-names 5"
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
  # Gubernator's gateway takes a JSON body whatever its Content-Type: curl -d sends a form type.
  code=$(curl -s -o /dev/null -w '%{http_code}' \
    -d '{"requests":[{"name":"g","unique_key":"u1","hits":1,"limit":5,"duration":60000}]}' \
    "http://127.0.0.1:$(http "$i")/v1/GetRateLimits")
  [[ "$code" == 200 ]] || fail "GetRateLimits with curl's form content type on n$i answered $code, not 200"
  curl -s -o /dev/null "http://127.0.0.1:$(http "$i")/v1/check?key=p$i&policy=api"
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$(http "$i")/v1/check?limit=-1")
  [[ "$code" == 400 ]] || fail "a bad check on n$i answered $code, not 400"
  /usr/bin/python3 - "$(grpc "$i")" <<'PY' 2>"$work/grpc.err" || fail "gRPC HealthCheck on n$i: $(tail -3 "$work/grpc.err")"
import sys, grpc
channel = grpc.insecure_channel(f"127.0.0.1:{sys.argv[1]}")
assert b"healthy" in channel.unary_unary("/pb.gubernator.V1/HealthCheck")(b"", timeout=10)
# envoy.service.ratelimit.v3 RateLimitRequest{domain: "edge", descriptors: [{entries: [{key: "path",
# value: "/login"}]}]}, encoded by hand (no generated stubs needed).
def field(number, payload):
    return bytes([number << 3 | 2, len(payload)]) + payload
entry = field(1, b"path") + field(2, b"/login")
request = field(1, b"edge") + field(2, field(1, entry))
channel.unary_unary("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit")(request, timeout=10)
PY
done

# 40 distinct inline limit names through n1 (--max-metric-names 5): 5 keep series, the rest count as other.
for k in $(seq 1 40); do
  curl -s -o /dev/null "http://127.0.0.1:$(http 1)/v1/check?key=c$k&name=name$k&limit=10&window_ms=60000"
done
# A broken policies file on SIGHUP: n1 counts a failed reload and keeps the policies in force.
echo '{ not json' >"$work/policies.json"
kill -HUP "$(cat "$RINGLIMIT_CLUSTER_DIR/n1/pid")"
sleep 1
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$(http 1)/v1/check?key=after-reload&policy=api")
[[ "$code" == 200 ]] || fail "after a bad policies file, a policy check on n1 answered $code, not 200"
sleep 0.5  # one flush interval: what the checks changed is written

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
# Issue 37's families, with values that follow from the traffic above.
value() { awk -v series="$2" 'index($0, series " ") == 1 { print $NF; found = 1 } END { if (!found) print "missing" }' "$work/metrics.$1"; }
expect() {  # expect NODE SERIES TEST VALUE: awk's comparison of the series' value
  local got; got=$(value "$1" "$2")
  awk -v g="$got" -v w="$4" "BEGIN { exit !(g != \"missing\" && g $3 w) }" || fail "n$1: $2 is $got, expected $3 $4"
}
expect 1 'ringlimit_config_reloads_total{file="policies",result="failure"}' == 1
expect 1 'ringlimit_config_reloads_total{file="policies",result="success"}' == 1
expect 1 'ringlimit_config_last_reload_successful{file="policies"}' == 0
expect 2 'ringlimit_config_last_reload_successful{file="policies"}' == 1
expect 1 'ringlimit_config_reloads_total{file="rls_config",result="success"}' == 2  # at start and on the SIGHUP
expect 1 'ringlimit_storage_persistent' == 1
expect 1 'ringlimit_storage_flush_errors_total' == 0
expect 1 'ringlimit_storage_flush_duration_seconds_count' '>' 0
expect 1 'ringlimit_storage_written_states_total' '>' 0
expect 1 'ringlimit_storage_last_flush_success_timestamp_seconds' '>' "$(($(date +%s) - 60))"
expect 1 'ringlimit_rocksdb_user_bytes_written_total' '>' 0
expect 1 'ringlimit_rocksdb_write_stall_stops_total' == 0
expect 1 'ringlimit_rocksdb_pending_compaction_bytes' '>=' 0
expect 1 'ringlimit_max_memory_bytes' '>' 0
expect 1 'ringlimit_handoff_keys_left' == 0  # no handoff in progress once the cluster is up (its figures: ReplicationScenariosTest.JoinShowsHandoffProgress...)
expect 1 'ringlimit_metric_names{family="limit_decisions"}' == 5
expect 1 'ringlimit_metric_names_cap' == 5
names=$(grep -c '^ringlimit_limit_decisions_total{.*outcome="allowed"}' "$work/metrics.1")
((names == 6)) || fail "n1: $names limit names in ringlimit_limit_decisions_total, expected the cap 5 + other"
expect 1 'ringlimit_limit_decisions_total{name="other",outcome="allowed"}' '>=' 35
rls=$(cat "$work"/metrics.* | awk '/^ringlimit_rls_decisions_total\{rule="edge.path_\/login",outcome="allowed"\}/ { s += $2 } END { print s + 0 }')
((rls == 3)) || fail "ringlimit_rls_decisions_total for edge.path_/login: $rls allowed, expected 3 (one per node)"

# Every metric the dashboard and the alerts name is served by a live node (histograms by their family).
used=$(grep -ohE '\b(ringlimit|process)_[a-z_]+' "$root/examples/grafana/ringlimit.json" "$root/examples/prometheus/alerts.yaml" |
  sed -E 's/_(bucket|sum|count)$//' | sort -u)
for metric in $used; do
  grep -q "^# TYPE $metric " "$work"/metrics.* || fail "$metric (dashboard or alerts) is on no node's /metrics"
done
echo "dashboard and alerts: $(echo "$used" | wc -w) metrics, all served"

# docs/operations.md lists every family once (the first cell of its metrics tables' rows), and every family
# a node of this cluster serves is there.
documented=$(grep -E '^\| `(ringlimit|process)_' "$root/docs/operations.md" | cut -d'|' -f2 |
  grep -oE '(ringlimit|process)_[a-z_]+' | sort)
twice=$(echo "$documented" | uniq -d)
[[ -z "$twice" ]] || fail "docs/operations.md lists these families more than once: $twice"
served=$(cat "$work"/metrics.* | sed -nE 's/^# TYPE ((ringlimit|process)_[a-z_]+) .*/\1/p' | sort -u)
undocumented=$(comm -23 <(echo "$served") <(echo "$documented" | sort -u))
[[ -z "$undocumented" ]] || fail "served but not in docs/operations.md's metrics tables: $undocumented"
echo "docs/operations.md: $(echo "$documented" | wc -l) families, each once; all $(echo "$served" | wc -l) served ones listed"

# Forwarded checks were counted somewhere (20 keys over 3 owners: most asked nodes do not own the key).
forwarded=$(cat "$work"/metrics.* | awk '/^ringlimit_forward_checks_total/ { s += $2 } END { print s + 0 }')
((forwarded > 0)) || fail "no forwarded check counted"
echo "PASS: /metrics of 3 nodes passes promtool check metrics ($(wc -l <"$work/metrics.1") lines on n1)"
