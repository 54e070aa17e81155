#!/usr/bin/env bash
# The layering rules of docs/architecture.md, checked on the sources (issue 36): dependencies point inwards
# -- base/ (Status, Published) includes only base/; limiter/ only base/ and limiter/; ring/ those and ring/;
# storage/ those and storage/; replication/ nothing of node/ or client/; client/ nothing of node/; inside
# node/, each folder only the folders of node/ beneath it -- and the Prometheus text format's
# `# TYPE` line is written in one place (node/metrics/metrics.cc). Fails naming each offending line.
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
failed=0

# check DIR ALLOWED_REGEX [SCOPE]: every project include in DIR's sources (those naming a path that matches
# SCOPE, by default any folder) names a folder matching ALLOWED_REGEX.
check() {
  local dir=$1 allowed=$2 scope=${3:-[a-z_]+/} bad
  bad=$(grep -rnE "^#include \"$scope" "$dir" --include='*.cc' --include='*.h' |
    grep -vE "^[^:]+:[0-9]+:#include \"($allowed)/" || true)
  if [[ -n "$bad" ]]; then
    echo "FAIL: $dir/ includes outside ($allowed)/:"
    echo "$bad"
    failed=1
    return 1
  else
    echo "ok: $dir/ includes only ($allowed)/"
  fi
}

check base 'base'
check limiter 'base|limiter'
check ring 'base|limiter|ring'
check storage 'base|limiter|ring|storage'
check replication 'base|limiter|ring|storage|replication'
check client 'base|client|limiter|ring'

# Inside node/, upwards: metrics, then the check service, then what the HTTP adapters share (http/); the
# protocol adapters -- api/ (the HTTP API), envoy/, gubernator/ -- each over those and never another one
# (their tests may wire two together); the transport (peer/) alone; the Forwarder over the transport and
# the service's interfaces; quota grants over the Forwarder's host; the cluster over all of these but the
# adapters; node/server (the wiring) everything.
check node/metrics 'node/(metrics)' 'node/'
check node/service 'node/(service|metrics)' 'node/'
check node/http 'node/(http|service|metrics)' 'node/'
check_adapter() {
  local dir=$1 bad
  bad=$(grep -rnE '^#include "node/(api|envoy|gubernator)/' "node/$dir" --include='*.cc' --include='*.h' |
    grep -vE "^[^:]+_test(_util)?\.(cc|h):" | grep -vE "^[^:]+:[0-9]+:#include \"node/$dir/" || true)
  if [[ -n "$bad" ]]; then
    echo "FAIL: the adapter node/$dir/ includes another adapter:"
    echo "$bad"
    failed=1
    return 1
  fi
  echo "ok: the adapter node/$dir/ includes no other adapter (its tests aside)"
  check "node/$dir" "node/($dir|api|envoy|gubernator|http|service|metrics)" 'node/'
}
check_adapter api
check_adapter envoy
check_adapter gubernator
check node/peer 'node/(peer)' 'node/'
check node/forward 'node/(forward|peer|service)' 'node/'
check node/grants 'node/(grants|forward|peer)' 'node/'
check node/cluster 'node/(cluster|forward|grants|peer|service|metrics)' 'node/'


# The text format's family header: written by node/metrics/metrics.cc alone (tests and docs aside).
type_lines=$(grep -rn '# TYPE' --include='*.cc' --include='*.h' base limiter ring storage replication node client |
  grep -v '_test\.cc:' | grep -v '^node/metrics/metrics\.h:.*//' || true)
if [[ $(grep -c . <<<"$type_lines") -ne 1 || "$type_lines" != node/metrics/metrics.cc:* ]]; then
  echo "FAIL: the '# TYPE' line must be written in node/metrics/metrics.cc only (AppendFamilyHeader); found:"
  echo "$type_lines"
  failed=1
else
  echo "ok: '# TYPE' written in one place: ${type_lines%%:*}"
fi

# The rule can fail: a planted include of node/ in limiter/ is caught (on a copy, never the tree).
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/limiter"
printf '#include "node/metrics/metrics.h"\n' >"$scratch/limiter/planted.h"
if (cd "$scratch" && check limiter 'base|limiter' >/dev/null); then
  echo "FAIL: a planted include of node/ in limiter/ was not caught"
  failed=1
fi
mkdir -p "$scratch/node/forward"
printf '#include "node/cluster/cluster.h"\n' >"$scratch/node/forward/planted.h"
if (cd "$scratch" && check node/forward 'node/(forward|peer|service)' 'node/' >/dev/null); then
  echo "FAIL: a planted include of node/cluster/ in node/forward/ was not caught"
  failed=1
fi
mkdir -p "$scratch/node/gubernator"
printf '#include "node/api/api_handler.h"\n' >"$scratch/node/gubernator/planted.cc"
if (cd "$scratch" && check_adapter gubernator >/dev/null); then
  echo "FAIL: a planted include of node/api/ in node/gubernator/ was not caught"
  failed=1
fi
exit $failed
