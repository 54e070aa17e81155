#!/usr/bin/env bash
# Batched checks alone (issue 38 item 2): POST /v1/check with 100 checks per request, the body of
# bench/http/run.sh's POST row, against one ringlimitd (--threads 1, memory only, pinned to CPU $SERVER_CPU)
# from `wrk -t1 -c$CONNECTIONS` pinned to CPU $CLIENT_CPU. Target: >= 1,000,000 decisions/s on one core.
#
#   bench/http/post.sh                                  # 5 runs x 5 s: about 40 s
#   BASELINE=/tmp/ringlimitd.old bench/http/post.sh     # and another binary, alternated run by run: ratios
#   CALLGRIND=1 bench/http/post.sh                      # user-space instructions per decision instead
#   CALLGRIND=1 CG_OUT=/tmp/post.callgrind bench/http/post.sh   # and keep the profile for callgrind_annotate
#
# Printed per binary, medians of $REPEAT runs: decisions/s (wrk's requests x 100 / duration), server CPU per
# decision (utime + stime from /proc/PID/stat over the run), decisions per server CPU second (what one core
# serves: the figure the target is about; wrk shares the machine, so the wall rate may be the client's), and
# wrk's CPU share. With BASELINE, each row's ratio against the baseline measured in the same run.
# CALLGRIND=1: the server under valgrind --tool=callgrind with instrumentation switched on for $CG_SECONDS s
# of wrk -c8 after a warm-up (every body sent twice), total / decisions, and the top functions by inclusive
# cost per decision.
#
# Knobs: DURATION=5s REPEAT=5 CONNECTIONS=16 KEYS=100000 SERVER_CPU=1 CLIENT_CPU=0 CG_SECONDS=10
#   RINGLIMITD=$RINGLIMIT_BUILD_DIR/node/server/ringlimitd (RINGLIMIT_BUILD_DIR=build/release), BASELINE=
set -euo pipefail
shopt -s inherit_errexit

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build_dir=${RINGLIMIT_BUILD_DIR:-$root/build/release}
ringlimitd=${RINGLIMITD:-$build_dir/node/server/ringlimitd}
baseline=${BASELINE:-}
duration=${DURATION:-5s}
repeat=${REPEAT:-5}
connections=${CONNECTIONS:-16}
keys=${KEYS:-100000}
export BATCH_KEYS=$keys  # bench/http/batch.lua's key space
server_cpu=${SERVER_CPU:-1}
client_cpu=${CLIENT_CPU:-0}
callgrind=${CALLGRIND:-0}
cg_seconds=${CG_SECONDS:-10}

log() { echo "bench/http/post: $*" >&2; }
die() { log "$*"; exit 1; }

[[ $repeat =~ ^[1-9][0-9]*$ ]] || die "REPEAT must be a positive integer, not '$repeat'"
[[ -x "$ringlimitd" ]] || die "no ringlimitd at $ringlimitd (scripts/build --target ringlimitd)"
[[ -z "$baseline" || -x "$baseline" ]] || die "BASELINE=$baseline is not an executable"
for tool in wrk taskset curl; do command -v "$tool" >/dev/null 2>&1 || die "needs $tool"; done
if ((callgrind)); then command -v valgrind >/dev/null 2>&1 || die "CALLGRIND=1 needs valgrind"; fi

work=$(mktemp -d /tmp/ringlimit-bench-post.XXXXXX)
server_pid=""
cleanup() {
  if [[ -n "$server_pid" ]]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT


# start BINARY [WRAPPER...]: sets server_pid and port.
start() {
  local binary=$1 deadline=$((SECONDS + 60))
  shift
  rm -f "$work/port.json"
  taskset -c "$server_cpu" "$@" "$binary" --listen 127.0.0.1:0 --peer-listen 127.0.0.1:0 --port-file "$work/port.json" \
    --threads 1 --log-level warn --max-keys 2000000 >"$work/server.log" 2>&1 &
  server_pid=$!
  until [[ -s "$work/port.json" ]]; do
    ((SECONDS <= deadline)) && kill -0 "$server_pid" 2>/dev/null || die "ringlimitd did not start: $(tail -5 "$work/server.log")"
    sleep 0.1
  done
  port=$(sed -E 's/.*"http":([0-9]+).*/\1/' "$work/port.json")
  until curl -s -o /dev/null "http://127.0.0.1:$port/readyz"; do
    ((SECONDS <= deadline)) || die "no answer from ringlimitd"
    sleep 0.1
  done
}
stop() {
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$server_pid/stat"; }

# wrk_post CONNECTIONS DURATION: prints "requests non2xx wrk_cpu_seconds seconds" (wrk's own duration).
wrk_post() {
  local out
  out=$( { TIMEFORMAT='%U %S'; time taskset -c "$client_cpu" wrk -t1 -c"$1" -d"$2" -s "$root/bench/http/batch.lua" \
    "http://127.0.0.1:$port/v1/check"; } 2>&1)
  awk '
    /requests in/ { requests = $1; seconds = $4 + 0 }  # "N requests in 5.00s, ..."
    /Non-2xx/ { non2xx = $NF }
    /^[0-9.]+ [0-9.]+$/ { cpu = $1 + $2 }
    END { printf "%d %d %.3f %.6f\n", requests, non2xx, cpu, seconds }' <<<"$out"
}

if ((callgrind)); then
  out=$work/callgrind.out
  log "ringlimitd under callgrind: ${cg_seconds} s of wrk -c8"
  start "$ringlimitd" valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out"
  # Warm-up until every one of batch.lua's 256 bodies was sent twice: the keys they name exist, so the
  # measured part is the steady state whatever the host's speed (first charges insert states, dearer).
  warm=0
  while ((warm < 512)); do
    read -r requests _ _ _ < <(wrk_post 8 3s)
    warm=$((warm + requests))
  done
  callgrind_control -i on "$server_pid" >/dev/null
  read -r requests non2xx _ _ < <(wrk_post 8 "${cg_seconds}s")
  callgrind_control -i off "$server_pid" >/dev/null
  callgrind_control -d "$server_pid" >/dev/null
  stop
  dump=$(ls "$out".* 2>/dev/null | head -1)
  [[ -n "$dump" ]] || die "no callgrind dump"
  [[ -n "${CG_OUT:-}" ]] && cp "$dump" "$CG_OUT"
  ((requests > 0)) || die "wrk completed no request"
  decisions=$((requests * 100))
  callgrind_annotate --inclusive=yes "$dump" >"$work/inclusive" 2>/dev/null
  total=$(awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }' "$work/inclusive")
  echo "POST /v1/check, 100 checks per request: $decisions decisions ($non2xx non-2xx responses) under callgrind"
  awk -v t="$total" -v n="$decisions" 'BEGIN { printf "user-space instructions per decision: %.0f\n", t / n }'
  echo "top functions, inclusive instructions per decision (callgrind_annotate --inclusive=yes):"
  awk -v n="$decisions" '/^-+$/ { dashes++; next }
    dashes >= 5 && NF > 0 { c = $1; gsub(",", "", c); $1 = ""; printf "  %8.0f %s\n", c / n, substr($0, 1, 150); if (++shown == 40) exit }' \
    "$work/inclusive"
  exit 0
fi

binaries=("$ringlimitd")
[[ -n "$baseline" ]] && binaries+=("$baseline")
declare -A lines
clk_tck=$(getconf CLK_TCK)
for ((run = 1; run <= repeat; run++)); do
  for b in "${!binaries[@]}"; do
    start "${binaries[$b]}"
    wrk_post "$connections" 1s >/dev/null  # warm-up: connections, the first keys
    before=$(cpu_ticks)
    read -r requests non2xx wrk_cpu wall < <(wrk_post "$connections" "$duration")
    after=$(cpu_ticks)
    stop
    ((requests > 0)) || die "wrk completed no request"
    ((non2xx == 0)) || die "$non2xx non-2xx answers from ${binaries[$b]}"
    log "run $run/$repeat, ${binaries[$b]}: $requests requests"
    # decisions/s, server us per decision, decisions per server CPU second, wrk CPU %
    lines[$b]+=$(awk -v r="$requests" -v w="$wall" -v c="$((after - before))" -v hz="$clk_tck" -v wc="$wrk_cpu" \
      'BEGIN { d = r * 100; printf "%.0f %.4f %.0f %.0f\n", d / w, c / hz * 1e6 / d, d / (c / hz), 100 * wc / w }')$'\n'
  done
done

median() {  # the median of each column
  awk '{ for (i = 1; i <= NF; i++) v[i, NR] = $i; n = NF }
    END { for (i = 1; i <= n; i++) { k = 0; for (j = 1; j <= NR; j++) s[++k] = v[i, j]
      for (a = 1; a <= k; a++) for (b = a + 1; b <= k; b++) if (s[b] < s[a]) { t = s[a]; s[a] = s[b]; s[b] = t }
      m = k % 2 ? s[(k + 1) / 2] : (s[k / 2] + s[k / 2 + 1]) / 2; printf "%s%s", (i > 1 ? " " : ""), m }
      print "" }'
}
echo "POST /v1/check, 100 checks per request, wrk -t1 -c$connections, $repeat runs x $duration, medians"
printf "%-50s %14s %12s %16s %8s\n" binary decisions/s "us/decision" "per CPU second" "wrk CPU"
declare -A per_core
for b in "${!binaries[@]}"; do
  read -r rate us core wrk_pct < <(printf '%s' "${lines[$b]}" | median)
  per_core[$b]=$core
  printf "%-50s %14.0f %12.3f %16.0f %7.0f%%\n" "${binaries[$b]}" "$rate" "$us" "$core" "$wrk_pct"
done
if [[ -n "$baseline" ]]; then
  awk -v a="${per_core[0]}" -v b="${per_core[1]}" \
    'BEGIN { printf "decisions per server CPU second, ringlimitd / baseline: %.2fx\n", a / b }'
fi
awk -v d="${per_core[0]}" 'BEGIN { printf "target >= 1,000,000 decisions/s on one core: %.0f: %s\n", d,
  (d >= 1000000 ? "MET" : "NOT MET") }'
