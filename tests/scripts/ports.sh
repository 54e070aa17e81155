# Sourced by the script tests (cluster_script_test.sh, readme_test.sh, metrics_test.sh): free port ranges for a
# scripts/cluster cluster, whose node i listens on BASE+i (HTTP), BASE+100+i (peer) and BASE+200+i (gRPC), and
# a cluster directory of the test's own.

# Whether a TCP socket is bound to port $1 now.
port_in_use() { ss -Htan "( sport = :$1 )" 2>/dev/null | grep -q .; }

# Prints a base port BASE, a multiple of 100 in [$1, $1 + 9700], such that BASE+1..BASE+9, BASE+101..BASE+109
# and BASE+201..BASE+209 are free now; fails after 50 tries. Give each test its own $1 range below the kernel's
# ephemeral range (32768-60999), where other tests' port-0 sockets land.
pick_base() {
  local low=$1 attempt base p busy
  for attempt in $(seq 1 50); do
    base=$((low + (RANDOM % 98) * 100))
    busy=0
    for p in $(seq $((base + 1)) $((base + 9))) $(seq $((base + 101)) $((base + 109))) \
      $(seq $((base + 201)) $((base + 209))); do
      if port_in_use "$p"; then busy=1; break; fi
    done
    ((busy)) || { echo "$base"; return 0; }
  done
  return 1
}

# A scripts/cluster cluster of the test's own: sets `work` (a fresh directory, removed on exit) and exports
# RINGLIMIT_CLUSTER_DIR, RINGLIMIT_BASE_PORT (pick_base $2), RINGLIMIT_CLUSTER_TIMEOUT and RINGLIMIT_NODE_FLAGS;
# on exit stops every node left (`$1 down --wipe`, then SIGKILL by recorded pid) and, when the test failed,
# prints each node's log tail. Needs RINGLIMITD, curl, jq and ss. $1: the scripts/cluster to run, $2: the
# lowest base port, $3: a name for the directory.
script_cluster_env() {
  cluster_script=$1
  [[ -x "${RINGLIMITD:-}" ]] || { echo "FAIL: set RINGLIMITD to the ringlimitd binary" >&2; exit 1; }
  local tool
  for tool in curl jq ss; do
    command -v "$tool" >/dev/null || { echo "FAIL: $tool is missing (scripts/bootstrap installs it)" >&2; exit 1; }
  done
  work=$(mktemp -d "${TMPDIR:-/tmp}/ringlimit-$3-XXXXXX")
  RINGLIMIT_CLUSTER_DIR="$work/cluster"
  export RINGLIMIT_CLUSTER_DIR RINGLIMITD
  export RINGLIMIT_CLUSTER_TIMEOUT=${RINGLIMIT_CLUSTER_TIMEOUT:-60}
  export RINGLIMIT_NODE_FLAGS="--threads 2"
  RINGLIMIT_BASE_PORT=$(pick_base "$2") || { echo "FAIL: no free port range" >&2; exit 1; }
  export RINGLIMIT_BASE_PORT
  trap script_cluster_cleanup EXIT
}

script_cluster_cleanup() {
  local rc=$? f log
  "$cluster_script" down --wipe >/dev/null 2>&1 || true
  for f in "$RINGLIMIT_CLUSTER_DIR"/n*/pid; do
    [[ -f "$f" ]] && kill -KILL "$(cat "$f")" 2>/dev/null || true
  done
  if ((rc != 0)); then
    for log in "$RINGLIMIT_CLUSTER_DIR"/n*/log; do
      [[ -f "$log" ]] && { echo "--- $log (tail) ---"; tail -n 30 "$log"; }
    done
  fi
  rm -rf "$work"
  exit "$rc"
}
