#!/usr/bin/env bash
# Where a GET check's CPU goes, ringlimitd against nginx limit_req, in one run (issue 14's profile): user-space
# instructions per request (valgrind's callgrind, which needs no hardware counters) and system calls per
# request (strace -c), so that the gap to nginx splits into the kernel's part and ringlimitd's own.
#
#   bench/http/profile.sh            # about 2 minutes; prints a table and the top functions of each server
#   RINGLIMITD=/path/to/ringlimitd bench/http/profile.sh
#   SERVERS=ringlimitd CALLGRIND_DIR=/tmp/cg bench/http/profile.sh  # one server; its callgrind dump and
#                                    # request count kept in /tmp/cg (callgrind_annotate --inclusive=yes ...)
#   DATA_DIR=1 bench/http/profile.sh # also ringlimitd --data-dir (RocksDB write-back): issue 38's instruction
#                                    # target for write-back, the flusher's thread and RocksDB's included
#
# For each server (nginx: one process, master_process off; ringlimitd: --threads 1, memory only; with DATA_DIR=1
# also ringlimitd-data: the same with --data-dir on a fresh directory):
#   instructions  callgrind with instrumentation off at start; switched on (callgrind_control -i on) for
#                 $CG_SECONDS s of `wrk -t1 -c8` over $KEYS uniform keys after a 3 s warm-up, then divided by
#                 the requests wrk completed. Valgrind runs the server ~50x slower, so wrk is not the bound.
#   syscalls      the server alone (no valgrind), `strace -c -f -p` during $STRACE_SECONDS s of
#                 `wrk -t1 -c32` over the same keys: each system call and the failed ones, per request.
# Same URLs and limits as bench/http/run.sh (limit 10^9 per s: every check admitted).
# Needs valgrind, strace, wrk and nginx (installed with apt-get if missing). Work files: a temporary directory.
set -euo pipefail
shopt -s inherit_errexit

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build_dir=${RINGLIMIT_BUILD_DIR:-$root/build/release}
ringlimitd=${RINGLIMITD:-$build_dir/node/server/ringlimitd}
keys=${KEYS:-100000}
cg_seconds=${CG_SECONDS:-10}
strace_seconds=${STRACE_SECONDS:-4}

# shellcheck source=bench/http/nginx.sh
source "$root/bench/http/nginx.sh"

log() { echo "bench/http/profile: $*" >&2; }
die() { log "$*"; exit 1; }

missing=()
for tool in valgrind strace wrk; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
command -v nginx >/dev/null 2>&1 || [[ -x /usr/sbin/nginx ]] || missing+=(nginx-light)
if ((${#missing[@]} > 0)); then
  log "installing ${missing[*]}"
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo=sudo
  $sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
if [[ ! -x "$ringlimitd" ]]; then
  log "building ringlimitd in $build_dir"
  RINGLIMIT_BUILD_DIR="$build_dir" "$root/scripts/build" --target ringlimitd >&2
fi

work=$(mktemp -d /tmp/ringlimit-profile.XXXXXX)
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

cat >"$work/keys.lua" <<EOF
local path = wrk.path
math.randomseed(42)
request = function()
  return wrk.format("GET", path .. "&key=k" .. math.random(1, $keys))
end
EOF
params="name=bench&algorithm=token_bucket&limit=1000000000&window_ms=1000"

# Polls `curl URL` until it answers or DEADLINE seconds pass (valgrind starts slowly).
wait_http() {
  local url=$1 deadline=$((SECONDS + $2))
  until curl -s -o /dev/null "$url"; do
    ((SECONDS <= deadline)) || die "no answer from $url"
    kill -0 "$server_pid" 2>/dev/null || die "the server exited: $(tail -5 "$work/server.log")"
    sleep 0.1
  done
}

# start SERVER [WRAPPER...]: starts nginx or ringlimitd under the wrapper command (valgrind, or nothing);
# sets server_pid and url.
start() {
  local server=$1 port
  shift
  if [[ $server == nginx ]]; then
    port=$(free_port) || die "no free port for nginx"
    write_nginx_conf "$work/nginx" "$port" single
    taskset -c 1 "$@" "$nginx_bin" -p "$work/nginx" -c "$work/nginx/nginx.conf" >"$work/server.log" 2>&1 &
    server_pid=$!
  else
    rm -f "$work/port.json"
    local data=()
    if [[ $server == ringlimitd-data ]]; then
      rm -rf "$work/rocksdb"
      data=(--data-dir "$work/rocksdb")
    fi
    taskset -c 1 "$@" "$ringlimitd" --listen 127.0.0.1:0 --peer-listen 127.0.0.1:0 --port-file "$work/port.json" \
      --threads 1 --log-level warn --max-keys 2000000 "${data[@]}" >"$work/server.log" 2>&1 &
    server_pid=$!
    local deadline=$((SECONDS + 60))
    until [[ -s "$work/port.json" ]]; do
      ((SECONDS <= deadline)) && kill -0 "$server_pid" 2>/dev/null || die "ringlimitd did not start: $(tail -5 "$work/server.log")"
      sleep 0.1
    done
    port=$(sed -E 's/.*"http":([0-9]+).*/\1/' "$work/port.json")
  fi
  url="http://127.0.0.1:$port/v1/check?$params"
  wait_http "$url&key=warmup" 60
}

stop() {
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}

# wrk_requests CONNECTIONS SECONDS: runs wrk on CPU 0 against $url over the keys; prints the requests done.
wrk_requests() {
  taskset -c 0 wrk -t1 -c"$1" -d"$2"s -s "$work/keys.lua" "$url" | awk '/requests in/ { print $1 }'
}

servers=(nginx ringlimitd)
[[ ${DATA_DIR:-0} == 1 ]] && servers+=(ringlimitd-data)
# SERVERS="ringlimitd ..." measures only those (no ratio to nginx without nginx).
[[ -n ${SERVERS:-} ]] && read -r -a servers <<<"$SERVERS"
declare -A instructions syscalls
for server in "${servers[@]}"; do
  log "$server under callgrind: ${cg_seconds} s of wrk -c8"
  out="$work/$server.callgrind"
  start "$server" valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out"
  wrk_requests 8 3 >/dev/null
  callgrind_control -i on "$server_pid" >/dev/null
  requests=$(wrk_requests 8 "$cg_seconds")
  callgrind_control -i off "$server_pid" >/dev/null
  callgrind_control -d "$server_pid" >/dev/null
  stop
  dump=$(ls "$out".* 2>/dev/null | head -1)
  [[ -n "$dump" ]] || die "no callgrind dump for $server"
  callgrind_annotate "$dump" >"$work/$server.annotate" 2>/dev/null
  if [[ -n ${CALLGRIND_DIR:-} ]]; then
    mkdir -p "$CALLGRIND_DIR" && cp "$dump" "$CALLGRIND_DIR/$server.callgrind"
    echo "$requests" >"$CALLGRIND_DIR/$server.requests"
  fi
  total=$(awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }' "$work/$server.annotate")
  instructions[$server]=$(awk -v t="$total" -v n="$requests" 'BEGIN { printf "%.0f", t / n }')

  log "$server under strace -c: ${strace_seconds} s of wrk -c32"
  start "$server"
  wrk_requests 32 1 >/dev/null
  timeout $((strace_seconds + 2)) strace -c -f -p "$server_pid" -o "$work/$server.strace" 2>/dev/null &
  strace_pid=$!
  sleep 0.5  # strace attaches (a missed half second only lowers nothing: counts are divided by requests)
  requests=$(wrk_requests 32 "$strace_seconds")
  wait "$strace_pid" || true
  stop
  # "calls errors syscall" per request, the calls above 0.01 per request.
  syscalls[$server]=$(awk -v n="$requests" '
    $NF ~ /^[a-z_0-9]+$/ && $NF != "total" && $NF != "syscall" && ($4 ~ /^[0-9]+$/) {
      errors = (NF == 6 ? $5 : 0)
      if ($4 / n >= 0.01) printf "%s %.3f%s; ", $NF, $4 / n, (errors > 0 ? sprintf(" (%.3f failed)", errors / n) : "")
    }' "$work/$server.strace")
done

echo
echo "ringlimit check-path profile (issue 14): $(date -u +%Y-%m-%dT%H:%M:%SZ), GET /v1/check over $keys keys, all admitted"
echo
echo "| server | user-space instructions per request (callgrind) | system calls per request (strace -c) |"
echo "|---|---:|---|"
for server in "${servers[@]}"; do
  echo "| $server | ${instructions[$server]} | ${syscalls[$server]% } |"
done
if [[ -n ${instructions[ringlimitd]:-} && -n ${instructions[nginx]:-} ]]; then
  awk -v a="${instructions[ringlimitd]}" -v b="${instructions[nginx]}" \
    'BEGIN { printf "\nringlimitd / nginx, user-space instructions per request: %.2fx\n", a / b }'
fi
if [[ -n ${instructions[ringlimitd-data]:-} && -n ${instructions[ringlimitd]:-} ]]; then
  awk -v a="${instructions[ringlimitd-data]}" -v b="${instructions[ringlimitd]}" \
    'BEGIN { printf "ringlimitd --data-dir / memory-only, user-space instructions per request: %.2fx (issue 38: <= 1.10x)\n", a / b }'
fi
for server in "${servers[@]}"; do
  echo
  echo "$server: top functions by own instructions (callgrind_annotate; per request = total / requests)"
  awk '/^-+$/ { dashes++; next } dashes >= 5 && NF > 0 { print "  " $0; if (++shown == 15) exit }' \
    "$work/$server.annotate" | cut -c1-180
done
