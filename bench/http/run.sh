#!/usr/bin/env bash
# HTTP benchmark: ringlimitd vs nginx limit_req, in one run, on this machine.
#
#   bench/http/run.sh                 # 10 s per scenario
#   DURATION=30s CONNECTIONS=32 bench/http/run.sh
#
# Builds ringlimitd if needed (RINGLIMIT_BUILD_DIR, default build/release; or RINGLIMITD=path), installs wrk and nginx-light
# if missing, then measures, with the server pinned to CPU $SERVER_CPU and wrk to CPU $CLIENT_CPU:
#   1. GET /v1/check, one hot key                 ringlimitd vs nginx limit_req keyed by $arg_key
#   2. GET /v1/check, 100k keys (wrk Lua script)  ringlimitd vs nginx limit_req keyed by $arg_key
#   3. POST /v1/check, 100 checks per request     ringlimitd only, reported as decisions/s
# and prints req/s, p50, p99 and the ratio ringlimitd/nginx. Targets (issue 3): ratio >= 1.0 with
# p99 < 1 ms; >= 1M decisions/s. Both servers run one thread/worker on one core and answer every
# request with a limiter decision; limits are set high enough that every request is admitted, so both
# do the same work (look up the key, update its counter, answer 200).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
here="$root/bench/http"
build_dir=${RINGLIMIT_BUILD_DIR:-$root/build/release}
duration=${DURATION:-10s}
connections=${CONNECTIONS:-32}
server_cpu=${SERVER_CPU:-0}
client_cpu=${CLIENT_CPU:-1}
keys=${KEYS:-100000}

log() { echo "bench/http: $*" >&2; }

# --- Prerequisites --------------------------------------------------------------------------------
missing=()
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
command -v nginx >/dev/null 2>&1 || [[ -x /usr/sbin/nginx ]] || missing+=(nginx-light)
command -v taskset >/dev/null 2>&1 || missing+=(util-linux)
command -v curl >/dev/null 2>&1 || missing+=(curl)
if ((${#missing[@]} > 0)); then
  log "installing ${missing[*]}"
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo=sudo
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" ||
    { $sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"; }
fi
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)

ringlimitd=${RINGLIMITD:-$build_dir/node/server/ringlimitd}
if [[ ! -x "$ringlimitd" ]]; then
  log "building ringlimitd in $build_dir"
  RINGLIMIT_BUILD_DIR="$build_dir" "$root/scripts/build" --target ringlimitd >&2
fi
if [[ $(nproc) -lt 2 ]]; then
  log "warning: fewer than 2 CPUs; server and wrk share one"
  client_cpu=$server_cpu
fi

work=$(mktemp -d /tmp/ringlimit-bench-http.XXXXXX)
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# Polls `curl URL` until it answers (any HTTP status) or 15 s pass.
wait_http() {
  local url=$1 deadline=$((SECONDS + 15))
  until curl -s -o /dev/null "$url"; do
    if ((SECONDS > deadline)); then log "no answer from $url"; return 1; fi
    sleep 0.05
  done
}

stop_server() {
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}

# Runs wrk and prints "req/s p50_ms p99_ms non2xx" (latencies converted to milliseconds).
run_wrk() {
  local out
  out=$(taskset -c "$client_cpu" wrk -t1 -c"$connections" -d"$duration" --latency "$@")
  echo "$out" >>"$work/wrk.log"
  echo "$out" | awk '
    function ms(v) {
      if (v ~ /us$/) { sub(/us$/, "", v); return v / 1000 }
      if (v ~ /ms$/) { sub(/ms$/, "", v); return v + 0 }
      if (v ~ /s$/)  { sub(/s$/, "", v);  return v * 1000 }
      return v
    }
    $1 == "50%" { p50 = ms($2) }
    $1 == "99%" { p99 = ms($2) }
    /^Requests\/sec:/ { rps = $2 }
    /Non-2xx or 3xx responses:/ { non2xx = $NF }
    END { printf "%.0f %.3f %.3f %d\n", rps, p50, p99, non2xx + 0 }'
}

# --- Lua scripts ----------------------------------------------------------------------------------
cat >"$work/keys.lua" <<EOF
-- One of $keys keys per request, uniformly at random.
local path = wrk.path
math.randomseed(42)
request = function()
  return wrk.format("GET", path .. "&key=k" .. math.random(1, $keys))
end
EOF

cat >"$work/batch.lua" <<EOF
-- POST /v1/check with 100 checks per request on 100 distinct keys (a run of consecutive keys from a
-- random start among $keys; a key may appear only once per limit in a batch); 256 bodies prepared up front.
math.randomseed(7)
local bodies = {}
for b = 1, 256 do
  local checks = {}
  local base = math.random(0, $keys - 1)
  for i = 1, 100 do
    checks[i] = string.format('{"key":"k%d","name":"bench","algorithm":"token_bucket","limit":1000000000,"window_ms":1000}',
                              (base + i) % $keys + 1)
  end
  bodies[b] = '{"checks":[' .. table.concat(checks, ",") .. ']}'
end
local n = 0
local headers = { ["Content-Type"] = "application/json" }
request = function()
  n = n % #bodies + 1
  return wrk.format("POST", "/v1/check", headers, bodies[n])
end
EOF

# --- ringlimitd -----------------------------------------------------------------------------------
log "ringlimitd: $ringlimitd (1 thread on CPU $server_cpu), wrk on CPU $client_cpu, $connections connections, $duration each"
extra=()
if "$ringlimitd" --help 2>/dev/null | grep -q -- "--peer-listen "; then extra=(--peer-listen 127.0.0.1:0); fi
taskset -c "$server_cpu" "$ringlimitd" --listen 127.0.0.1:0 --port-file "$work/port.json" --threads 1 \
  --log-level warn --max-keys 2000000 --max-connections 100000 "${extra[@]}" >"$work/ringlimitd.log" 2>&1 &
server_pid=$!
deadline=$((SECONDS + 15))
until [[ -s "$work/port.json" ]]; do
  ((SECONDS > deadline)) && { log "ringlimitd did not start"; cat "$work/ringlimitd.log" >&2; exit 1; }
  sleep 0.05
done
rl_port=$(sed -E 's/.*"http":([0-9]+).*/\1/' "$work/port.json")
wait_http "http://127.0.0.1:$rl_port/readyz"
rl_params="name=bench&algorithm=token_bucket&limit=1000000000&window_ms=1000"
rl_hot=$(run_wrk "http://127.0.0.1:$rl_port/v1/check?key=hot&$rl_params")
rl_many=$(run_wrk -s "$work/keys.lua" "http://127.0.0.1:$rl_port/v1/check?$rl_params")
rl_batch=$(run_wrk -s "$work/batch.lua" "http://127.0.0.1:$rl_port/v1/check")
stop_server

# --- nginx limit_req ------------------------------------------------------------------------------
# What a user would run instead: nginx's limit_req keyed by the same query argument, one worker,
# answering 200 (empty_gif: a content handler, so limit_req's phase runs) or 429 when limited.
nginx_port=""
for _ in $(seq 1 50); do
  candidate=$((20000 + RANDOM % 40000))
  if ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then nginx_port=$candidate; break; fi
done
[[ -n "$nginx_port" ]] || { log "no free port for nginx"; exit 1; }
mkdir -p "$work/nginx"
cat >"$work/nginx/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 100000000;
  client_body_temp_path $work/nginx/body;
  proxy_temp_path $work/nginx/proxy;
  fastcgi_temp_path $work/nginx/fastcgi;
  uwsgi_temp_path $work/nginx/uwsgi;
  scgi_temp_path $work/nginx/scgi;
  limit_req_zone \$arg_key zone=ratelimit:64m rate=1000000r/s;
  limit_req_status 429;
  server {
    listen 127.0.0.1:$nginx_port;
    location /v1/check {
      limit_req zone=ratelimit burst=1000000 nodelay;
      empty_gif;
    }
  }
}
EOF
taskset -c "$server_cpu" "$nginx_bin" -p "$work/nginx" -c "$work/nginx/nginx.conf" >"$work/nginx/stdout.log" 2>&1 &
server_pid=$!
wait_http "http://127.0.0.1:$nginx_port/v1/check?key=warmup"
ng_hot=$(run_wrk "http://127.0.0.1:$nginx_port/v1/check?key=hot&$rl_params")
ng_many=$(run_wrk -s "$work/keys.lua" "http://127.0.0.1:$nginx_port/v1/check?$rl_params")
stop_server

# --- Report ---------------------------------------------------------------------------------------
report() {
  local name=$1 rl=$2 ng=$3
  read -r rl_rps rl_p50 rl_p99 rl_bad <<<"$rl"
  read -r ng_rps ng_p50 ng_p99 ng_bad <<<"$ng"
  local ratio
  ratio=$(awk -v a="$rl_rps" -v b="$ng_rps" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
  printf "%-26s %12s %9s %9s %8s\n" "$name ringlimitd" "$rl_rps" "$rl_p50" "$rl_p99" "$rl_bad"
  printf "%-26s %12s %9s %9s %8s\n" "$name nginx limit_req" "$ng_rps" "$ng_p50" "$ng_p99" "$ng_bad"
  local verdict="MET"
  if awk -v r="$ratio" -v p="$rl_p99" 'BEGIN { exit !(r < 1.0 || p >= 1.0) }'; then verdict="NOT MET"; fi
  printf "%-26s %12s   (target >= 1.0 with ringlimitd p99 < 1 ms: %s)\n" "$name ratio" "$ratio" "$verdict"
}

echo
echo "ringlimit HTTP benchmark: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs))"
echo "server on CPU $server_cpu (1 thread / 1 worker), wrk -t1 -c$connections -d$duration on CPU $client_cpu"
printf "%-26s %12s %9s %9s %8s\n" "scenario" "req/s" "p50 ms" "p99 ms" "non-2xx"
report "GET hot key" "$rl_hot" "$ng_hot"
report "GET ${keys} keys" "$rl_many" "$ng_many"
read -r b_rps b_p50 b_p99 b_bad <<<"$rl_batch"
decisions=$(awk -v r="$b_rps" 'BEGIN { printf "%.0f", r * 100 }')
printf "%-26s %12s %9s %9s %8s\n" "POST 100 checks/request" "$b_rps" "$b_p50" "$b_p99" "$b_bad"
verdict=$(awk -v d="$decisions" 'BEGIN { print (d >= 1000000 ? "MET" : "NOT MET") }')
printf "%-26s %12s   (target >= 1,000,000: %s)\n" "POST decisions/s" "$decisions" "$verdict"
