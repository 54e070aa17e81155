#!/usr/bin/env bash
# The README's commands, taken from README.md itself and run as written, so that the README stays true:
#   - the quick start's checks (the block after "a line to try"): curl GET, curl POST, the CLI;
#   - the cluster walk-through ("Reshaping the cluster"): every `peek` must print remaining 6;
#   - the single node with examples/policies.json.
# What differs from a user's run, and only that: the ports (127.0.0.1:7001-7004 become a free range picked at
# run time, so the test can run next to a real cluster), the cluster and data directories (temporary), the
# binaries (the ones under test: $RINGLIMITD, $RINGLIMIT_CLI), and the single node gets
# `--peer-listen 127.0.0.1:0` and runs in the background.
#
#   RINGLIMITD=build/release/node/server/ringlimitd RINGLIMIT_CLI=build/release/client/cli/ringlimit \
#     tests/scripts/readme_test.sh
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
readme=$root/README.md
[[ -x "${RINGLIMITD:-}" ]] || { echo "FAIL: set RINGLIMITD to the ringlimitd binary" >&2; exit 1; }
[[ -x "${RINGLIMIT_CLI:-}" ]] || { echo "FAIL: set RINGLIMIT_CLI to the ringlimit CLI binary" >&2; exit 1; }
for tool in curl jq ss; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool is missing (scripts/bootstrap installs it)" >&2; exit 1; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/ringlimit-readme-test-XXXXXX")
export RINGLIMIT_CLUSTER_DIR="$work/cluster" RINGLIMITD
export RINGLIMIT_CLUSTER_TIMEOUT=${RINGLIMIT_CLUSTER_TIMEOUT:-60}

# A free port range for the cluster (tests/scripts/ports.sh), from 10000-19999 (cluster_script_test: 20000-29999).
source "$root/tests/scripts/ports.sh"
base=$(pick_base 10000) || { echo "FAIL: no free port range" >&2; exit 1; }
export RINGLIMIT_BASE_PORT=$base

single_pid=""
cleanup() {
  local rc=$?
  [[ -n "$single_pid" ]] && kill -KILL "$single_pid" 2>/dev/null || true
  (cd "$root" && scripts/cluster down --wipe >/dev/null 2>&1) || true
  for f in "$RINGLIMIT_CLUSTER_DIR"/n*/pid; do
    [[ -f "$f" ]] && kill -KILL "$(cat "$f")" 2>/dev/null || true
  done
  if ((rc != 0)); then
    for log in "$RINGLIMIT_CLUSTER_DIR"/n*/log "$work/single.log"; do
      [[ -f "$log" ]] && { echo "--- $log (tail) ---"; tail -n 30 "$log"; }
    done
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# The body of the N-th ```sh block of the README.
block() {
  awk -v want="$1" '/^```sh/ { n++; inside = (n == want); next } /^```/ { inside = 0 } inside' "$readme"
}
# The same with this run's ports, directories and binaries.
localize() {
  # (base is a multiple of 100: port 700N becomes base + N.)
  sed -E \
    -e "s#127\.0\.0\.1:700([0-9])#127.0.0.1:$((base / 100))0\1#g" \
    -e "s#peek 700([0-9])#peek $((base / 100))0\1#g" \
    -e "s#build/release/client/cli/ringlimit#$RINGLIMIT_CLI#g" \
    -e "s#build/release/node/server/ringlimitd#$RINGLIMITD#g" \
    -e "s#--data-dir \.data#--data-dir $work/data#g"
}
# Runs bash code (from the README) in the repository, printing it and its output into $work/out.
run_block() {
  echo "=== $1"
  sed 's/^/    $ /' <<<"$2"
  (cd "$root" && bash -euo pipefail -c "$2") >"$work/out" 2>&1 || { sed 's/^/    /' "$work/out"; fail "$1 failed"; }
  sed 's/^/    /' "$work/out"
}

# The blocks are found by what they hold, not by number, so that a new block elsewhere does not shift them.
find_block() {
  local pattern=$1 n=1 body
  while body=$(block "$n") && [[ -n "$body" ]]; do
    grep -qF -- "$pattern" <<<"$body" && { echo "$n"; return 0; }
    n=$((n + 1))
  done
  fail "no \`\`\`sh block of README.md holds '$pattern'"
}

# --- The cluster walk-through ---------------------------------------------------------------------
walk=$(block "$(find_block 'scripts/cluster add && peek')" | localize)
# `peek` is the README's own function; what it prints is checked below.
run_block "cluster walk-through" "$walk"
peeks=$(grep -c '"remaining"' "$work/out" || true)
((peeks == 6)) || fail "the walk-through printed $peeks peeks, expected 6"
bad=$(grep '"remaining"' "$work/out" | grep -vc '"remaining":6' || true)
((bad == 0)) || fail "a peek did not print remaining 6 (the README promises 6 at every step)"
grep -q '200 200 200 200' "$work/out" || fail "the four checks of the walk-through were not all 200"

# --- The quick start's checks ---------------------------------------------------------------------
(cd "$root" && scripts/cluster up >"$work/up.log" 2>&1) || { cat "$work/up.log"; fail "scripts/cluster up failed"; }
quick=$(block "$(find_block 'curl -i ')" | localize)
# The CLI line says to set RINGLIMIT_NODE for a node other than the default 127.0.0.1:7001.
export RINGLIMIT_NODE=127.0.0.1:$((base + 1))
run_block "quick start" "$quick"
grep -q '^HTTP/1.1 200' "$work/out" || fail "the GET check did not answer 200"
grep -q '"allowed":true' "$work/out" || fail "the POST check was not allowed"
grep -qi 'allowed' <(grep -v '^HTTP\|^{' "$work/out") || fail "the CLI printed no decision"
(cd "$root" && scripts/cluster down --wipe >/dev/null 2>&1)

# --- One node with the example policies -----------------------------------------------------------
single=$(block "$(find_block 'examples/policies.json')" | localize | grep -v '^scripts/bootstrap')
daemon=$(grep -F -- "$RINGLIMITD" <<<"$single")
rest=$(grep -vF -- "$RINGLIMITD" <<<"$single")
echo "=== single node"
echo "    \$ $daemon --peer-listen 127.0.0.1:0 &"
(cd "$root" && eval "exec $daemon --peer-listen 127.0.0.1:0" >"$work/single.log" 2>&1) &
single_pid=$!
deadline=$((SECONDS + 30))
until curl -fs -o /dev/null "http://127.0.0.1:$((base + 1))/readyz"; do
  kill -0 "$single_pid" 2>/dev/null || fail "the single node exited"
  ((SECONDS < deadline)) || fail "the single node was not ready within 30 s"
  sleep 0.1
done
run_block "single node check" "$rest"
jq -e '.allowed == true and (.results | length) >= 1' "$work/out" >/dev/null ||
  fail "the policy check was not allowed"
kill "$single_pid"
wait "$single_pid" 2>/dev/null || true
single_pid=""
echo "PASS"
