#!/usr/bin/env bash
# End-to-end test of scripts/cluster: up 3, status, add, kill n2, start n2, remove n4, down --wipe, with
# checks through every running node in between, and counters charged before `add` that must read the
# same through every node after each step (replication, failover and handoff keep them). Uses the ringlimitd in $RINGLIMITD, a temporary
# cluster directory and a free port range picked at run time, so it can run next to a real cluster
# or other tests.
#
#   RINGLIMITD=build/release/node/server/ringlimitd tests/scripts/cluster_script_test.sh
#
# Every step is bounded (scripts/cluster waits at most $RINGLIMIT_CLUSTER_TIMEOUT seconds); whatever
# happens, the nodes started here are stopped on exit.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
script=${CLUSTER_SCRIPT:-$root/scripts/cluster}  # CLUSTER_SCRIPT: try a modified copy
# Its own cluster directory and a free port range from 20000-29999 (tests/scripts/ports.sh), cleaned up on exit.
source "$root/tests/scripts/ports.sh"
script_cluster_env "$script" 20000 script-test

step=0
fail() { echo "FAIL (step $step): $*" >&2; exit 1; }
# run EXPECTED_RC args...: runs scripts/cluster, prints its output, checks the exit code.
run() {
  local want=$1; shift
  step=$((step + 1))
  echo "=== [$step] scripts/cluster $* (expect exit $want)"
  local rc=0 start=$SECONDS
  "$script" "$@" >"$work/out" 2>&1 || rc=$?
  sed 's/^/    /' "$work/out"
  echo "    -> exit $rc in $((SECONDS - start)) s"
  ((rc == want)) || fail "scripts/cluster $* exited $rc, expected $want"
}
out() { cat "$work/out"; }
http() { echo "http://127.0.0.1:$((RINGLIMIT_BASE_PORT + $1))"; }

# Every node in "$@" answers checks: for a few keys, one check through each node; every answer is a
# 200 naming the same owner for one key, and that owner is one of the nodes listed.
checks_work_on() {
  local key i owner want
  for key in user:1 user:2 user:3 ip:10.0.0.7 api-key:abc; do
    want=""
    for i in "$@"; do
      local body
      body=$(curl -fsS --max-time 5 -X POST "$(http "$i")/v1/check" -H 'Content-Type: application/json' \
        -d "{\"checks\":[{\"key\":\"$key\",\"name\":\"s$step\",\"algorithm\":\"token_bucket\",\"limit\":1000,\"window_ms\":60000}]}") ||
        fail "check of $key through n$i failed"
      owner=$(jq -r '.results[0].owner' <<<"$body")
      [[ "$(jq -r '.results[0].allowed' <<<"$body")" == true ]] || fail "check of $key through n$i denied: $body"
      [[ -n "$want" ]] || want=$owner
      [[ "$owner" == "$want" ]] || fail "$key: n$i says owner $owner, an earlier node said $want"
    done
    local ok=0
    for i in "$@"; do [[ "$want" == "n$i" ]] && ok=1; done
    ((ok)) || fail "$key owned by '$want', which is not among the running nodes ($*)"
  done
  echo "    checks answered through n$(echo "$@" | sed 's/ /, n/g')"
}
# Node $1's view: the ids in state $2, comma-separated.
seen_in_state() { curl -fsS --max-time 5 "$(http "$1")/v1/cluster" | jq -r --arg s "$2" '[.members[] | select(.state == $s) | .id] | sort | join(",")'; }
# sees I STATE WANT: the members node I sees in STATE become WANT (ids, sorted, comma-separated) within
# 10 s. Polled, because on a loaded machine a live member can be suspected for a moment (SWIM: it refutes
# within a probe period or two), and declaring a killed one dead takes failure detection (~2 s).
sees() {
  local deadline=$((SECONDS + 10))
  until [[ "$(seen_in_state "$1" "$2" 2>/dev/null)" == "$3" ]]; do
    ((SECONDS < deadline)) || { echo "    n$1 sees $2: $(seen_in_state "$1" "$2" 2>&1)"; return 1; }
    sleep 0.1
  done
}
sees_alive() { sees "$1" alive "$2"; }
sees_dead() { sees "$1" dead "$2"; }

# Counters that must survive every reshaping: key surv:K is charged CHARGE[K] units of a token bucket of
# 10 per day (no refill worth a unit during the test) before `add`; after add, kill, start and remove a
# peek (cost 0) through every running node must still read 10 - CHARGE[K] remaining. The keys spread
# over the ring, so some live on the nodes that are killed and removed.
SURVIVE_KEYS=(surv:1 surv:2 surv:3 surv:4 surv:5 surv:6 surv:7 surv:8)
SURVIVE_CHARGE=(1 3 4 6 7 9 10 10)
survive_check() {  # survive_check NODE KEY COST: prints the check's JSON answer
  curl -fsS --max-time 5 -X POST "$(http "$1")/v1/check" -H 'Content-Type: application/json' \
    -d "{\"checks\":[{\"key\":\"$2\",\"name\":\"survive\",\"algorithm\":\"token_bucket\",\"limit\":10,\"window_ms\":86400000,\"cost\":$3}]}"
}
charge_survivors() {
  local k body
  for k in "${!SURVIVE_KEYS[@]}"; do
    body=$(survive_check 1 "${SURVIVE_KEYS[$k]}" "${SURVIVE_CHARGE[$k]}") || fail "charging ${SURVIVE_KEYS[$k]} failed"
    [[ "$(jq -r '.results[0].remaining' <<<"$body")" == $((10 - SURVIVE_CHARGE[k])) ]] ||
      fail "charging ${SURVIVE_KEYS[$k]} by ${SURVIVE_CHARGE[$k]}: $body"
  done
  echo "    charged ${#SURVIVE_KEYS[@]} keys (surv:*) by ${SURVIVE_CHARGE[*]} of 10"
}
# counters_survive NODES...: every surv:K reads 10 - CHARGE[K] remaining through every node listed (and an
# exhausted one is denied a unit).
counters_survive() {
  local k i body
  for k in "${!SURVIVE_KEYS[@]}"; do
    for i in "$@"; do
      body=$(survive_check "$i" "${SURVIVE_KEYS[$k]}" 0) || fail "peek of ${SURVIVE_KEYS[$k]} through n$i failed"
      [[ "$(jq -r '.results[0].remaining' <<<"$body")" == $((10 - SURVIVE_CHARGE[k])) ]] ||
        fail "${SURVIVE_KEYS[$k]} through n$i: expected remaining $((10 - SURVIVE_CHARGE[k])) (charged ${SURVIVE_CHARGE[$k]} before), got $body"
    done
  done
  for i in "$@"; do
    body=$(survive_check "$i" surv:8 1) || fail "check of surv:8 through n$i failed"
    [[ "$(jq -r '.results[0].allowed' <<<"$body")" == false ]] || fail "exhausted surv:8 admitted through n$i: $body"
  done
  echo "    counters intact through n$(echo "$@" | sed 's/ /, n/g')"
}

echo "cluster dir $RINGLIMIT_CLUSTER_DIR, base port $RINGLIMIT_BASE_PORT"

run 0 up 3
out | grep -q "http://127.0.0.1:$((RINGLIMIT_BASE_PORT + 3))" || fail "up did not print the table with n3"
out | grep -q "curl" || fail "up did not print a curl line"
for i in 1 2 3; do sees_alive "$i" "n1,n2,n3" || fail "n$i does not see n1..n3 alive"; done
checks_work_on 1 2 3

# Every node serves gRPC on BASE+200+i: Gubernator's HealthCheck answers "healthy" with 3 peers (over
# Debian's python3-grpcio when it is there; else the port must at least be listening).
for i in 1 2 3; do
  grpc_port=$((RINGLIMIT_BASE_PORT + 200 + i))
  if /usr/bin/python3 -c 'import grpc' 2>/dev/null; then
    /usr/bin/python3 - "$grpc_port" <<'PY' || fail "n$i: no healthy gRPC HealthCheck on port $grpc_port"
import sys, grpc
channel = grpc.insecure_channel(f"127.0.0.1:{sys.argv[1]}")
call = channel.unary_unary("/pb.gubernator.V1/HealthCheck",
                           request_serializer=lambda b: b, response_deserializer=lambda b: b)
answer = call(b"", timeout=5)  # HealthCheckResp: field 1 "healthy", field 3 peer_count 3
sys.exit(0 if answer.startswith(b"\x0a\x07healthy") and b"\x18\x03" in answer else 1)
PY
  else
    [[ -n "$(ss -ltnH "( sport = :$grpc_port )")" ]] || fail "n$i: nothing listens on gRPC port $grpc_port"
  fi
done

run 0 up 3  # rerun: nothing to do, still succeeds
for i in 1 2 3; do sees_alive "$i" "n1,n2,n3" || fail "rerun of up changed the cluster"; done

run 0 status
for i in 1 2 3; do out | grep -Eq "^n$i +alive" || fail "status does not show n$i alive"; done

charge_survivors
counters_survive 1 2 3

run 0 add
out | grep -q "n4 joined" || fail "add did not report n4"
for i in 1 2 3 4; do sees_alive "$i" "n1,n2,n3,n4" || fail "n$i does not see n4 alive"; done
checks_work_on 1 2 3 4
counters_survive 1 2 3 4

run 0 kill n2
kill -0 "$(cat "$RINGLIMIT_CLUSTER_DIR/n2/pid")" 2>/dev/null && fail "n2 still running after kill"
# Until every node has declared n2 dead, two of them may each decide one of its keys (each falls back to
# the next holder on its own ring): one owner per key is promised after failure detection.
for i in 1 3 4; do sees_dead "$i" "n2" || fail "n$i does not see n2 dead"; done
checks_work_on 1 3 4
counters_survive 1 3 4
run 0 kill n2  # rerun: already dead, still succeeds

run 0 start n2
for i in 1 2 3 4; do sees_alive "$i" "n1,n2,n3,n4" || fail "n$i does not see n2 back"; done
checks_work_on 1 2 3 4
counters_survive 1 2 3 4

run 0 remove n4
out | grep -q "n4 left" || fail "remove did not report n4 leaving"
curl -fsS --max-time 2 "$(http 4)/readyz" >/dev/null 2>&1 && fail "n4 still answers after remove"
for i in 1 2 3; do
  sees_alive "$i" "n1,n2,n3" || fail "n$i still sees n4 alive after remove"
done
checks_work_on 1 2 3
counters_survive 1 2 3
run 0 remove n4  # rerun: already gone, still succeeds

# Wrong usage fails with a message and changes nothing.
run 1 kill bogus
run 1 start n9
run 2 frobnicate
checks_work_on 1 2 3

run 0 down --wipe
for i in 1 2 3; do
  curl -fsS --max-time 2 "$(http "$i")/readyz" >/dev/null 2>&1 && fail "n$i still answers after down"
done
[[ ! -e "$RINGLIMIT_CLUSTER_DIR" ]] || fail "down --wipe left $RINGLIMIT_CLUSTER_DIR"
run 1 status  # nothing running: a clear error
echo "PASS: scripts/cluster end to end ($step steps)"
