#!/usr/bin/env bash
# HTTP benchmark of issue 14: server CPU per rate-limit check, ringlimitd vs nginx limit_req vs a bare
# Boost.Beast server, measured in one run on this machine.
#
#   bench/http/run.sh                      # 3 rounds x 5 s per cell, then cluster_bench: about 11 minutes
#   DURATION=1s REPEAT=1 bench/http/run.sh # smoke run
#
# Servers, each alone on the machine, measured in rounds (round r: every server started, warmed up, measured in
# every scenario, stopped; so that the host's slower minutes fall on every server alike), pinned to CPU
# $SERVER_CPU with one thread / one worker:
#   nginx limit_req        nginx 1 worker, limit_req keyed by $arg_key, answering 200 (empty_gif) or 429
#   naive Beast            bench/http/naive_http_server: Beast HTTP/1.1, keep-alive, "200 ok", no limiter
#   ringlimitd memory      ringlimitd --threads 1, counters in memory only
#   ringlimitd --data-dir  ringlimitd --threads 1 --data-dir <tmp dir> (RocksDB write-back)
#   Node.js + Redis        bench/compare/app.js: Node.js http + rate-limiter-flexible + ioredis, against a
#                          redis-server on the same CPU (server CPU = node + redis-server); NODE_BASELINE=0 skips it
# Scenarios, GET /v1/check from `wrk -t1 -c$CONNECTIONS --latency` (keep-alive) pinned to CPU $CLIENT_CPU:
#   hot key, allowed       one key, limit 1e9 per s: every request is admitted
#   N keys, allowed        $KEYS keys drawn uniformly at random (wrk Lua script), same limit
#   hot key, denied        one key, limit 1 per day (nginx: a second zone, rate=1r/m, no burst): all but
#                          the first request get 429
#   N keys, denied         the same over $KEYS keys: all but the first request per key get 429
# The naive server has no limiter, so no denied rows ("-"). Plus, ringlimitd only: POST /v1/check with 100
# checks per request on 100 distinct keys, reported per decision. Then the cluster targets, from
# bench/cluster/cluster_bench (3 real nodes on this machine; CLUSTER=0 skips it): a forwarded check's CPU
# against a local one's, and a node of the cluster reached by a ring-aware client (every check sent to its
# key's owner, the "local" phase) against a single node, per node and per CPU second.
#
# Measured for every wrk run: req/s and p99 (wrk --latency); server CPU per check = the utime + stime of the
# server's processes (/proc/PID/stat fields 14 and 15; nginx: master + worker), read right before and
# right after the run, over the requests wrk completed (x100 for POST); wrk's own user + sys CPU (bash
# `time`) as a % of one CPU over the run -- near 100% means the client, not the server, bounds req/s --
# and the share of non-2xx answers. Each cell is the median of $REPEAT runs (per column). The ratio is a
# row's CPU per check over nginx's in the same scenario. Ends with the targets of issue 14, MET / NOT MET:
# ringlimitd memory-only CPU per check <= nginx's with p99 <= 1 ms in each of the four scenarios;
# --data-dir <= 1.10x memory-only at N keys allowed; POST >= 1,000,000 decisions/s (memory-only); two serving
# threads >= 1.7x one thread's req/s (N keys allowed, memory-only, wrk -t2; with 4 CPUs or more the server
# has CPUs 2-3 and wrk 0-1; with fewer they share every CPU, req/s cannot show the target, and the verdict
# is an estimate from the CPU per check of two threads against one: 2 / ratio); ringlimitd memory req/s >= 5x
# Node.js + Redis's (hot key and N keys, allowed); forwarded <= 1.5x local CPU per check, and a ring-aware
# node >= 0.9x a single node's checks per CPU second.
#
# Knobs (environment, defaults): DURATION=5s REPEAT=3 CONNECTIONS=32 KEYS=100000 SERVER_CPU=1 CLIENT_CPU=0
#   RINGLIMIT_BUILD_DIR=build/release, RINGLIMITD=$RINGLIMIT_BUILD_DIR/node/server/ringlimitd
#   NODE_BASELINE=1 (0: no Node.js + Redis rows), NODE_MODULES=~/.cache/ringlimit-bench/node_modules (where
#   rate-limiter-flexible and ioredis are, installed there with npm if missing), CLUSTER=1 (0: no cluster
#   targets), CLUSTER_SECONDS=5 (measured seconds per cluster_bench phase)
# Builds ringlimitd, naive_http_server and cluster_bench if missing (scripts/build), installs wrk,
# nginx-light, taskset and curl if missing, and redis-server, nodejs and npm for the Node.js rows (apt-get).
# Work files live in a temporary directory removed on exit.
set -euo pipefail
shopt -s inherit_errexit

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build_dir=${RINGLIMIT_BUILD_DIR:-$root/build/release}
duration=${DURATION:-5s}
repeat=${REPEAT:-3}
connections=${CONNECTIONS:-32}
keys=${KEYS:-100000}
export BATCH_KEYS=$keys  # bench/http/batch.lua's key space
server_cpu=${SERVER_CPU:-1}
client_cpu=${CLIENT_CPU:-0}
node_baseline=${NODE_BASELINE:-1}
node_modules=${NODE_MODULES:-${XDG_CACHE_HOME:-$HOME/.cache}/ringlimit-bench/node_modules}
cluster=${CLUSTER:-1}
cluster_seconds=${CLUSTER_SECONDS:-5}

# shellcheck source=bench/http/nginx.sh
source "$root/bench/http/nginx.sh"

log() { echo "bench/http: $*" >&2; }
die() { log "$*"; exit 1; }

[[ $repeat =~ ^[1-9][0-9]*$ ]] || die "REPEAT must be a positive integer, not '$repeat'"
[[ $keys =~ ^[1-9][0-9]*$ ]] || die "KEYS must be a positive integer, not '$keys'"
[[ $node_baseline =~ ^[01]$ ]] || die "NODE_BASELINE must be 0 or 1, not '$node_baseline'"
[[ $cluster =~ ^[01]$ ]] || die "CLUSTER must be 0 or 1, not '$cluster'"
[[ $cluster_seconds =~ ^[1-9][0-9]*$ ]] || die "CLUSTER_SECONDS must be a positive integer, not '$cluster_seconds'"

# --- Prerequisites --------------------------------------------------------------------------------
missing=()
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
command -v nginx >/dev/null 2>&1 || [[ -x /usr/sbin/nginx ]] || missing+=(nginx-light)
command -v taskset >/dev/null 2>&1 || missing+=(util-linux)
command -v curl >/dev/null 2>&1 || missing+=(curl)
if ((node_baseline)); then
  command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
  command -v node >/dev/null 2>&1 || missing+=(nodejs)
  [[ -d "$node_modules/rate-limiter-flexible" && -d "$node_modules/ioredis" ]] ||
    command -v npm >/dev/null 2>&1 || missing+=(npm)
fi
if ((${#missing[@]} > 0)); then
  log "installing ${missing[*]}"
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo=sudo
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" ||
    { $sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"; }
fi
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
# The Node.js baseline's packages, installed once into $node_modules (npm needs the network then). Without
# them the Node.js rows are left out with a note rather than failing the whole run.
node_skipped=""
if ((node_baseline)) && [[ ! -d "$node_modules/rate-limiter-flexible" || ! -d "$node_modules/ioredis" ]]; then
  log "npm install rate-limiter-flexible ioredis (into $(dirname "$node_modules"))"
  mkdir -p "$(dirname "$node_modules")"
  # (A package.json of its own, so that npm installs here rather than into a project further up.)
  if ! (cd "$(dirname "$node_modules")" && { [[ -f package.json ]] || npm init -y >/dev/null; } &&
    npm install --silent --no-audit --no-fund rate-limiter-flexible ioredis >/dev/null 2>&1) ||
    [[ ! -d "$node_modules/rate-limiter-flexible" || ! -d "$node_modules/ioredis" ]]; then
    node_skipped="npm could not install rate-limiter-flexible and ioredis into $(dirname "$node_modules")"
    log "warning: $node_skipped; no Node.js + Redis rows"
    node_baseline=0
  fi
fi

ringlimitd=${RINGLIMITD:-$build_dir/node/server/ringlimitd}
if [[ ! -x "$ringlimitd" ]]; then
  log "building ringlimitd in $build_dir"
  RINGLIMIT_BUILD_DIR="$build_dir" "$root/scripts/build" --target ringlimitd >&2
fi
naive=$build_dir/bench/http/naive_http_server
if [[ ! -x "$naive" ]]; then
  log "building naive_http_server in $build_dir"
  # A build directory configured before bench/http had a CMakeLists.txt does not know the target yet.
  if [[ -f "$build_dir/CMakeCache.txt" ]]; then cmake "$build_dir" >&2; fi
  RINGLIMIT_BUILD_DIR="$build_dir" "$root/scripts/build" --target naive_http_server >&2
fi
if [[ $(nproc) -lt 2 ]]; then
  log "warning: fewer than 2 CPUs; server and wrk share one"
  client_cpu=$server_cpu
fi
clk_tck=$(getconf CLK_TCK)
# Where the server and wrk run, and with how many threads; changed only for the two-thread rows at the end.
server_cpus=$server_cpu
server_threads=1
client_cpus=$client_cpu
wrk_threads=1

work=$(mktemp -d /tmp/ringlimit-bench-http.XXXXXX)
server_pid=""
ringlimitd_started=0
server_pids=()  # every process whose CPU is the server's (nginx: master and worker; node and redis-server)
# Stops the server being measured (every process of it).
stop_server() {
  local pid
  for pid in "${server_pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  server_pid=""
  server_pids=()
}

cleanup() {
  stop_server
  rm -rf "$work"
}
trap cleanup EXIT

# --- Servers --------------------------------------------------------------------------------------
# Polls `curl URL` until it answers (any HTTP status) or 15 s pass.
wait_http() {
  local url=$1 deadline=$((SECONDS + 15))
  until curl -s -o /dev/null "$url"; do
    ((SECONDS <= deadline)) || { log "no answer from $url"; return 1; }
    sleep 0.05
  done
}

# Polls until FILE is non-empty or 15 s pass; on timeout shows LOG and fails.
wait_file() {
  local file=$1 log_file=$2 deadline=$((SECONDS + 15))
  until [[ -s "$file" ]]; do
    ((SECONDS <= deadline)) || { log "server did not start:"; cat "$log_file" >&2; return 1; }
    kill -0 "$server_pid" 2>/dev/null || { log "server exited:"; cat "$log_file" >&2; return 1; }
    sleep 0.05
  done
}

# Starts ringlimitd with the flags of this benchmark plus "$@"; sets server_pid, server_pids and port.
start_ringlimitd() {
  local peer=()
  # (The help read whole first: grep -q stopping early would fail the pipeline under pipefail.)
  local help
  help=$("$ringlimitd" --help 2>/dev/null || true)
  if grep -q -- "--peer-listen " <<<"$help"; then peer=(--peer-listen 127.0.0.1:0); fi
  ringlimitd_started=$((ringlimitd_started + 1))  # a port file and a log per start
  local port_file=$work/port.$ringlimitd_started.json log_file=$work/ringlimitd.$ringlimitd_started.log
  taskset -c "$server_cpus" "$ringlimitd" --listen 127.0.0.1:0 --port-file "$port_file" --threads "$server_threads" \
    --log-level warn --max-keys 2000000 --max-connections 4096 "${peer[@]}" "$@" >"$log_file" 2>&1 &
  server_pid=$!
  server_pids=("$server_pid")
  wait_file "$port_file" "$log_file"
  port=$(sed -E 's/.*"http":([0-9]+).*/\1/' "$port_file")
  wait_http "http://127.0.0.1:$port/readyz"
}

start_naive() {
  rm -f "$work/naive.port"  # (a round before left the last one's)
  taskset -c "$server_cpu" "$naive" --port 0 >"$work/naive.port" 2>"$work/naive.log" &
  server_pid=$!
  server_pids=("$server_pid")
  wait_file "$work/naive.port" "$work/naive.log"
  port=$(<"$work/naive.port")
  wait_http "http://127.0.0.1:$port/"
}

# nginx limit_req, one worker (bench/http/nginx.sh has the configuration).
start_nginx() {
  port=$(free_port) || die "no free port for nginx"
  write_nginx_conf "$work/nginx" "$port" worker
  taskset -c "$server_cpu" "$nginx_bin" -p "$work/nginx" -c "$work/nginx/nginx.conf" >"$work/nginx/stdout.log" 2>&1 &
  server_pid=$!
  wait_http "http://127.0.0.1:$port/v1/check?key=warmup"
  local workers
  workers=$(pgrep -P "$server_pid") || die "nginx has no worker process"
  read -ra server_pids <<<"$server_pid $(echo "$workers" | xargs)"
}

# The Node.js app server of bench/compare (rate-limiter-flexible over ioredis) and its redis-server, both
# on the server CPU; their CPU is counted together.
start_node() {
  local redis_port redis_pid deadline=$((SECONDS + 15))
  redis_port=$(free_port) || die "no free port for redis-server"
  taskset -c "$server_cpu" redis-server --bind 127.0.0.1 --port "$redis_port" --save '' --appendonly no \
    >"$work/redis.log" 2>&1 &
  redis_pid=$!
  server_pids=("$redis_pid")
  until (exec 3<>"/dev/tcp/127.0.0.1/$redis_port") 2>/dev/null; do
    ((SECONDS <= deadline)) || { log "redis-server did not start:"; cat "$work/redis.log" >&2; return 1; }
    sleep 0.05
  done
  port=$(free_port) || die "no free port for node"
  PORT=$port REDIS_PORT=$redis_port NODE_PATH="$node_modules" taskset -c "$server_cpu" node \
    "$root/bench/compare/app.js" >"$work/node.log" 2>&1 &
  server_pid=$!
  server_pids=("$server_pid" "$redis_pid")
  wait_http "http://127.0.0.1:$port/v1/check?key=warmup"
}

# --- Measurement ----------------------------------------------------------------------------------
# Prints the clock ticks (utime + stime) the processes in server_pids have used so far.
cpu_ticks() {
  local pid stat fields total=0
  for pid in "${server_pids[@]}"; do
    stat=$(<"/proc/$pid/stat")
    read -ra fields <<<"${stat##*) }"  # fields from the 3rd on, past "(comm)": utime is 14, stime 15
    total=$((total + fields[11] + fields[12]))
  done
  echo "$total"
}

# One wrk run against the running server, wrk arguments "$@", PER_REQUEST checks per request ($1).
# Prints "req/s p99_ms cpu_us_per_check wrk_cpu_pct non2xx_pct".
measure_once() {
  local per_request=$1 before after times TIMEFORMAT='%R %U %S'  # `time`: real, user, sys seconds
  shift
  before=$(cpu_ticks)
  if ! { time taskset -c "$client_cpus" wrk -t"$wrk_threads" -c"$connections" -d"$duration" --latency "$@" >"$work/wrk.out" 2>&1; } \
    2>"$work/wrk.time"; then
    cat "$work/wrk.out" >&2
    die "wrk $* failed"
  fi
  after=$(cpu_ticks)
  times=$(<"$work/wrk.time")
  {
    echo "== wrk $* (server CPU ticks $before -> $after, wrk real/user/sys $times)"
    cat "$work/wrk.out"
  } >>"$work/wrk.log"
  awk -v ticks=$((after - before)) -v hz="$clk_tck" -v per="$per_request" -v times="$times" '
    function ms(v) {
      if (v ~ /us$/) { sub(/us$/, "", v); return v / 1000 }
      if (v ~ /ms$/) { sub(/ms$/, "", v); return v + 0 }
      if (v ~ /m$/)  { sub(/m$/, "", v);  return v * 60000 }
      if (v ~ /s$/)  { sub(/s$/, "", v);  return v * 1000 }
      return v
    }
    $2 == "requests" && $3 == "in" { requests = $1 }
    $1 == "99%" { p99 = ms($2) }
    /^Requests\/sec:/ { rps = $2 }
    /Non-2xx or 3xx responses:/ { non2xx = $NF }
    /^ *Socket errors:/ { socket_errors = $0 }
    END {
      if (requests <= 0) { print "wrk completed no request" > "/dev/stderr"; exit 1 }
      if (socket_errors != "") {
        sub(/^ */, "", socket_errors)
        print "bench/http: warning: wrk " socket_errors > "/dev/stderr"
      }
      split(times, t, " ")  # real user sys, in seconds
      printf "%.1f %.4f %.4f %.1f %.2f\n", rps, p99, ticks / hz * 1e6 / (requests * per),
             (t[1] > 0 ? (t[2] + t[3]) / t[1] * 100 : 0), non2xx / requests * 100
    }' "$work/wrk.out"
}

# Reads lines of numbers and prints the median of each column (mean of the middle two for an even count).
median() {
  awk '
    { for (c = 1; c <= NF; c++) value[c, NR] = $c + 0; columns = NF }
    END {
      for (c = 1; c <= columns; c++) {
        for (r = 1; r <= NR; r++) {  # insertion sort of column c into sorted[1..r]
          x = value[c, r]
          for (i = r - 1; i > 0 && sorted[i] > x; i--) sorted[i + 1] = sorted[i]
          sorted[i + 1] = x
        }
        m = NR % 2 ? sorted[(NR + 1) / 2] : (sorted[NR / 2] + sorted[NR / 2 + 1]) / 2
        printf "%s%.4f", (c > 1 ? " " : ""), m
      }
      print ""
    }'
}

# The runs go in rounds: in round r every server is started alone, warmed up, measured in every scenario and
# stopped, and round r+1 starts over. A slower minute of the host then falls on every server alike instead
# of on whichever was measured then (with each server's runs back to back, the same code measured 30 %
# apart in one run); and no other server idles on the CPU beside the one measured (their timers raised
# everyone's p99 when all were kept up).
# settle: waits until the server is idle (under 5 % of a CPU over 200 ms; at most 15 s), so that the work a
# run leaves behind (RocksDB's flushes after a --data-dir run) is not counted in the next one.
settle() {
  local before after deadline=$((SECONDS + 15))
  while ((SECONDS <= deadline)); do
    before=$(cpu_ticks)
    sleep 0.2
    after=$(cpu_ticks)
    (((after - before) * 100 <= 5 * clk_tck / 5)) && return 0
  done
  log "warning: the server was still busy after 15 s; measuring anyway"
}

# runs[server|scenario] = one line per run; results[server|scenario] = "req/s p99_ms cpu_us_per_check
# wrk_cpu_pct non2xx_pct", the medians of the runs.
declare -A runs results
# run_cell SERVER SCENARIO: one run of that cell against the running server, appended to runs.
run_cell() {
  local server=$1 scenario=$2 path=/v1/check params=$allow_params url line
  if [[ $scenario == *_denied ]]; then
    params=$deny_params
    [[ $server == nginx ]] && path=/v1/denied  # nginx: the location with the 1r/m zone
  fi
  url="http://127.0.0.1:$port$path?$params"
  settle
  case $scenario in
    hot_*) line=$(measure_once 1 "$url&key=hot") ;;
    many_*) line=$(measure_once 1 -s "$work/keys.lua" "$url") ;;
    post) line=$(measure_once 100 -s "$root/bench/http/batch.lua" "http://127.0.0.1:$port/v1/check") ;;
    *) die "unknown scenario $scenario" ;;
  esac
  runs["$server|$scenario"]+="$line"$'\n'
}
# summarize: the medians of every cell run.
summarize() {
  local cell
  for cell in "${!runs[@]}"; do results[$cell]=$(printf '%s' "${runs[$cell]}" | median); done
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


# --- Runs -----------------------------------------------------------------------------------------
allow_params="name=bench&algorithm=token_bucket&limit=1000000000&window_ms=1000"
deny_params="name=denied&algorithm=token_bucket&limit=1&window_ms=86400000"
scenarios=(hot_allowed many_allowed hot_denied many_denied)
declare -A scenario_name=([hot_allowed]="hot key, allowed" [many_allowed]="$keys keys, allowed"
  [hot_denied]="hot key, denied" [many_denied]="$keys keys, denied")
servers=(nginx naive memory data_dir node)
declare -A server_name=([nginx]="nginx limit_req" [naive]="naive Beast" [memory]="ringlimitd memory"
  [data_dir]="ringlimitd --data-dir" [node]="Node.js + Redis")
if ((keys % 1000 == 0)); then
  scenario_name[many_allowed]="$((keys / 1000))k keys, allowed"
  scenario_name[many_denied]="$((keys / 1000))k keys, denied"
fi

log "servers on CPU $server_cpu, wrk -t1 -c$connections on CPU $client_cpu, $repeat rounds x $duration per cell"
# start SERVER: starts it alone (a fresh data directory for --data-dir), warms it up (not measured: Node.js
# compiles its hot paths, every server opens its first connections).
start() {
  case $1 in
    nginx) start_nginx ;;
    naive) start_naive ;;
    memory) start_ringlimitd ;;
    data_dir)
      rm -rf "$work/rocksdb"
      start_ringlimitd --data-dir "$work/rocksdb"
      ;;
    node) start_node ;;
    threads*) start_ringlimitd ;;
  esac
  taskset -c "$client_cpus" wrk -t"$wrk_threads" -c"$connections" -d1s \
    "http://127.0.0.1:$port/v1/check?$allow_params&key=warmup" >/dev/null 2>&1 || die "wrk could not warm up $1"
}
run_servers=()
for server in "${servers[@]}"; do
  [[ $server == node ]] && ((!node_baseline)) && continue
  run_servers+=("$server")
done
for ((round = 1; round <= repeat; round++)); do
  for server in "${run_servers[@]}"; do
    start "$server"
    for scenario in "${scenarios[@]}"; do
      [[ $server == naive && $scenario == *_denied ]] && continue  # no limiter, nothing to deny
      log "round $round/$repeat: $server, $scenario ($duration)"
      run_cell "$server" "$scenario"
    done
    if [[ $server == memory || $server == data_dir ]]; then
      log "round $round/$repeat: $server, POST 100 checks ($duration)"
      run_cell "$server" post
    fi
    stop_server
  done
done

# Two serving threads against one (memory-only, N keys allowed), both in the same placement, wrk -t2. With
# 4 CPUs or more the server gets two of its own; with fewer, the server and wrk share them, which makes req/s
# meaningless for the target: the CPU per check of two threads against one's is what is left to compare.
if (($(nproc) >= 4)); then
  server_cpus=2,3 client_cpus=0,1
  threads_placement="server on CPUs 2-3, wrk -t2 -c$connections on CPUs 0-1"
else
  server_cpus=0-$(($(nproc) - 1)) client_cpus=0-$(($(nproc) - 1))
  threads_placement="server and wrk -t2 -c$connections sharing CPUs $server_cpus"
fi
wrk_threads=2
for ((round = 1; round <= repeat; round++)); do
  for server_threads in 1 2; do
    start "threads$server_threads"
    log "round $round/$repeat: ringlimitd --threads $server_threads, many_allowed, wrk -t2 ($duration)"
    run_cell "threads$server_threads" many_allowed
    stop_server
  done
done
summarize

# The cluster targets: cluster_bench starts its own nodes (the tests/cluster harness, 127.0.0.1, free ports)
# and is not pinned: three nodes and its load generator share the machine's CPUs.
if ((cluster)); then
  cluster_bench=$build_dir/bench/cluster/cluster_bench
  if [[ ! -x "$cluster_bench" ]]; then
    log "building cluster_bench in $build_dir"
    RINGLIMIT_BUILD_DIR="$build_dir" "$root/scripts/build" --target cluster_bench >&2
  fi
  log "cluster: cluster_bench --seconds=$cluster_seconds (4 phases)"
  # The nodes it starts are $build_dir's ringlimitd (its path is compiled in), whatever RINGLIMITD says.
  "$cluster_bench" --seconds="$cluster_seconds" --warmup=1 >"$work/cluster.out" 2>&1 ||
    { cat "$work/cluster.out" >&2; die "cluster_bench failed"; }
fi

# --- Report ---------------------------------------------------------------------------------------
# field SERVER SCENARIO N: the Nth median (1 req/s, 2 p99 ms, 3 CPU us per check, 4 wrk CPU %, 5 non-2xx %).
field() {
  local values
  read -ra values <<<"${results["$1|$2"]}"
  echo "${values[$(($3 - 1))]}"
}

notes=()
echo
cpu_model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)
echo "ringlimit HTTP benchmark (issue 14): $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) CPUs ($cpu_model)"
echo "servers on CPU $server_cpu (1 thread / 1 worker), wrk -t1 -c$connections keep-alive on CPU $client_cpu;" \
  "each cell the median of $repeat x $duration"
echo
echo "| server | scenario | req/s | p99 ms | server CPU µs per check | CPU per check vs nginx | wrk CPU % | non-2xx % |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
for scenario in "${scenarios[@]}"; do
  for server in "${servers[@]}"; do
    if [[ -z "${results["$server|$scenario"]:-}" ]]; then
      echo "| ${server_name[$server]} | ${scenario_name[$scenario]} | - | - | - | - | - | - |"
      continue
    fi
    read -r rps p99 cpu wrk_cpu non2xx <<<"${results["$server|$scenario"]}"
    ratio=$(awk -v a="$cpu" -v b="$(field nginx "$scenario" 3)" \
      'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }')
    printf "| %s | %s | %.0f | %.3f | %.2f | %s | %.0f | %.1f |\n" "${server_name[$server]}" \
      "${scenario_name[$scenario]}" "$rps" "$p99" "$cpu" "$ratio" "$wrk_cpu" "$non2xx"
    row="${server_name[$server]}, ${scenario_name[$scenario]}"
    if awk -v w="$wrk_cpu" 'BEGIN { exit !(w >= 95) }'; then
      notes+=("$row: wrk at ${wrk_cpu%.*}% CPU, the client bounds req/s")
    fi
    case $scenario in
      *_allowed) expected="n == 0" what="none" ;;
      *_denied) expected="n >= 90" what="nearly all" ;;
    esac
    if ! awk -v n="$non2xx" "BEGIN { exit !($expected) }"; then
      notes+=("$row: $(printf %.1f "$non2xx")% non-2xx answers, expected $what")
    fi
  done
done

echo
echo "| server | scenario | req/s | decisions/s | p99 ms | server CPU µs per decision | wrk CPU % | non-2xx % |"
echo "|---|---|---:|---:|---:|---:|---:|---:|"
for server in memory data_dir; do
  read -r rps p99 cpu wrk_cpu non2xx <<<"${results["$server|post"]}"
  printf "| %s | POST, 100 checks per request | %.0f | %.0f | %.3f | %.3f | %.0f | %.1f |\n" "${server_name[$server]}" \
    "$rps" "$(awk -v r="$rps" 'BEGIN { printf "%.0f", r * 100 }')" "$p99" "$cpu" "$wrk_cpu" "$non2xx"
  if awk -v n="$non2xx" 'BEGIN { exit !(n > 0) }'; then
    notes+=("${server_name[$server]}, POST: $(printf %.1f "$non2xx")% non-2xx answers, expected none")
  fi
done

echo
echo "Two serving threads, ${scenario_name[many_allowed]} ($threads_placement):"
echo
echo "| server | req/s | p99 ms | server CPU µs per check | wrk CPU % |"
echo "|---|---:|---:|---:|---:|"
for t in 1 2; do
  read -r rps p99 cpu wrk_cpu non2xx <<<"${results["threads$t|many_allowed"]}"
  printf "| ringlimitd memory --threads %d | %.0f | %.3f | %.2f | %.0f |\n" "$t" "$rps" "$p99" "$cpu" "$wrk_cpu"
done

if ((cluster)); then
  echo
  echo "Cluster (bench/cluster/cluster_bench --seconds=$cluster_seconds --warmup=1, not pinned):"
  echo
  echo '```'
  cat "$work/cluster.out"
  echo '```'
fi

[[ -z "$node_skipped" ]] || notes+=("no Node.js + Redis rows: $node_skipped")
if ((${#notes[@]} > 0)); then
  echo
  printf "note: %s\n" "${notes[@]}"
fi

# verdict CONDITION: MET if awk finds the condition true. Ratios are judged unrounded and shown to 3 decimals,
# so a ratio printed as 1.10x in the table can be NOT MET against <= 1.10.
verdict() { if awk "BEGIN { exit !($1) }"; then echo "MET"; else echo "NOT MET"; fi; }
# ratio A B: A / B to 6 decimals (99 when B is 0).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.6f", (b > 0 ? a / b : 99) }'; }
echo
echo "Targets (issue 14):"
for scenario in "${scenarios[@]}"; do
  r=$(ratio "$(field memory "$scenario" 3)" "$(field nginx "$scenario" 3)")
  p99=$(field memory "$scenario" 2)
  printf "  ringlimitd memory CPU per check <= nginx's, p99 <= 1 ms, %-19s %6.3fx, p99 %.3f ms: %s\n" \
    "${scenario_name[$scenario]}:" "$r" "$p99" "$(verdict "$r <= 1.0 && $p99 <= 1.0")"
done
r=$(ratio "$(field data_dir many_allowed 3)" "$(field memory many_allowed 3)")
printf "  ringlimitd --data-dir CPU per check <= 1.10x memory-only, %s: %.3fx: %s\n" \
  "${scenario_name[many_allowed]}" "$r" "$(verdict "$r <= 1.10")"
decisions=$(awk -v r="$(field memory post 1)" 'BEGIN { printf "%.0f", r * 100 }')
printf "  ringlimitd memory POST decisions/s >= 1,000,000: %s: %s\n" "$decisions" "$(verdict "$decisions >= 1000000")"
if (($(nproc) >= 4)); then
  r=$(ratio "$(field threads2 many_allowed 1)" "$(field threads1 many_allowed 1)")
  printf "  two serving threads >= 1.7x one thread's req/s, %s: %.3fx: %s\n" "${scenario_name[many_allowed]}" "$r" \
    "$(verdict "$r >= 1.7")"
else
  # Not measurable here; if two threads on two cores of their own each paid this CPU per check, they would
  # serve 2 / r times one thread's checks.
  r=$(ratio "$(field threads2 many_allowed 3)" "$(field threads1 many_allowed 3)")
  printf "  two serving threads >= 1.7x one thread's req/s: not measurable on %d CPUs; CPU per check 2 threads /" "$(nproc)"
  printf " 1 thread %.3fx, i.e. about %.2fx on two cores of their own (estimate): %s\n" "$r" \
    "$(awk -v r="$r" 'BEGIN { printf "%.6f", 2 / r }')" "$(verdict "2 / $r >= 1.7") (estimate)"
fi
if [[ -n "${results["node|many_allowed"]:-}" ]]; then
  for scenario in hot_allowed many_allowed; do
    r=$(ratio "$(field memory "$scenario" 1)" "$(field node "$scenario" 1)")
    printf "  ringlimitd memory req/s >= 5x Node.js + Redis's, %-19s %6.2fx: %s\n" "${scenario_name[$scenario]}:" "$r" \
      "$(verdict "$r >= 5")"
  done
fi
if ((cluster)); then
  # cluster_value PATTERN: the ratio on cluster_bench's line starting with PATTERN.
  cluster_value() { awk -v p="$1" 'index($0, p) == 1 { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9.]+x$/) { sub(/x$/, "", $i); print $i; exit } }' "$work/cluster.out"; }
  r=$(cluster_value "CPU per check, forwarded / local")
  printf "  cluster: a forwarded check's CPU <= 1.5x a local one's: %.2fx: %s\n" "$r" "$(verdict "$r <= 1.5")"
  r=$(cluster_value "ring-aware, checks per CPU second")
  printf "  cluster: a ring-aware node >= 0.9x a single node's checks per CPU second: %.2fx: %s\n" "$r" \
    "$(verdict "$r >= 0.9")"
fi
