#!/usr/bin/env bash
# A/B of two ringlimitd binaries: server CPU per GET /v1/check, the two alternating so that a drift of the
# machine hits both alike (on a noisy VM one bench/http/run.sh cell varies by +-15 %, too coarse for a
# step of a few per cent).
#   bench/http/ab.sh OLD_RINGLIMITD NEW_RINGLIMITD [PAIRS]     (default 6 pairs, about 2.5 minutes)
# Each run: the binary with --threads 1 on CPU 1, `wrk -t1 -c32` on CPU 0 over 100k uniform keys (limit
# 10^9 per second: all admitted), 2 s warm-up then 5 s measured; server utime+stime (/proc/PID/stat) over
# the requests wrk completed. Prints every run and the median of each binary.
set -euo pipefail
old=${1:?usage: ab.sh OLD_RINGLIMITD NEW_RINGLIMITD [PAIRS]}
new=${2:?usage: ab.sh OLD_RINGLIMITD NEW_RINGLIMITD [PAIRS]}
pairs=${3:-6}
command -v wrk >/dev/null || { echo "ab.sh: needs wrk (apt-get install wrk)" >&2; exit 1; }
work=$(mktemp -d /tmp/ringlimit-ab.XXXXXX)
trap 'rm -rf "$work"' EXIT
cat >"$work/keys.lua" <<'LUA'
local path = wrk.path
math.randomseed(42)
request = function()
  return wrk.format("GET", path .. "&key=k" .. math.random(1, 100000))
end
LUA
clk_tck=$(getconf CLK_TCK)

# measure BINARY: prints the server CPU in microseconds per check.
measure() {
  rm -f "$work/port.json"
  taskset -c 1 "$1" --listen 127.0.0.1:0 --peer-listen 127.0.0.1:0 --port-file "$work/port.json" --threads 1 \
    --log-level warn --max-keys 2000000 >"$work/server.log" 2>&1 &
  local pid=$! deadline=$((SECONDS + 15))
  until [[ -s "$work/port.json" ]]; do
    ((SECONDS <= deadline)) && kill -0 "$pid" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
    sleep 0.05
  done
  local port url stat before after requests
  port=$(sed -E 's/.*"http":([0-9]+).*/\1/' "$work/port.json")
  url="http://127.0.0.1:$port/v1/check?name=bench&algorithm=token_bucket&limit=1000000000&window_ms=1000"
  taskset -c 0 wrk -t1 -c32 -d2s -s "$work/keys.lua" "$url" >/dev/null
  stat=$(<"/proc/$pid/stat"); read -ra before <<<"${stat##*) }"
  requests=$(taskset -c 0 wrk -t1 -c32 -d5s -s "$work/keys.lua" "$url" | awk '/requests in/ {print $1}')
  stat=$(<"/proc/$pid/stat"); read -ra after <<<"${stat##*) }"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  awk -v t=$((after[11] + after[12] - before[11] - before[12])) -v hz="$clk_tck" -v n="$requests" \
    'BEGIN { printf "%.2f\n", t * 1e6 / hz / n }'
}

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

olds=() news=()
for ((i = 1; i <= pairs; i++)); do
  o=$(measure "$old"); n=$(measure "$new")
  olds+=("$o"); news+=("$n")
  echo "pair $i: old $o us/check, new $n us/check"
done
mo=$(printf '%s\n' "${olds[@]}" | median); mn=$(printf '%s\n' "${news[@]}" | median)
awk -v o="$mo" -v n="$mn" 'BEGIN { printf "median: old %.2f, new %.2f us/check (new/old %.3f)\n", o, n, n / o }'
