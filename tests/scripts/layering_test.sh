#!/usr/bin/env bash
# The layering rules of docs/architecture.md, checked on the sources (issue 36): dependencies point inwards
# -- base/ (Status, Published) includes only base/; limiter/ only base/ and limiter/; ring/ those and ring/;
# storage/ those and storage/; replication/ nothing of node/ or client/; client/ nothing of node/; inside
# node/, each folder only the folders of node/ beneath it -- and the Prometheus text format's
# `# TYPE` line is written in one place (node/api/metrics.cc). Fails naming each offending line.
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

# The transport and Envoy's configuration stand alone; the API knows the Envoy configuration; the Forwarder
# knows the transport's outcomes and the API's CheckRouter; quota grants the Forwarder's host; the cluster
# all of these; node/server (the wiring) everything.
check node/rls 'node/(rls)' 'node/'
check node/peer 'node/(peer)' 'node/'
check node/api 'node/(api|rls)' 'node/'
check node/forward 'node/(forward|peer|api)' 'node/'
check node/grants 'node/(grants|forward|peer)' 'node/'
check node/cluster 'node/(cluster|forward|grants|peer|api)' 'node/'

# The text format's family header: written by node/api/metrics.cc alone (tests and docs aside).
type_lines=$(grep -rn '# TYPE' --include='*.cc' --include='*.h' base limiter ring storage replication node client |
  grep -v '_test\.cc:' | grep -v '^node/api/metrics\.h:.*//' || true)
if [[ $(grep -c . <<<"$type_lines") -ne 1 || "$type_lines" != node/api/metrics.cc:* ]]; then
  echo "FAIL: the '# TYPE' line must be written in node/api/metrics.cc only (AppendFamilyHeader); found:"
  echo "$type_lines"
  failed=1
else
  echo "ok: '# TYPE' written in one place: ${type_lines%%:*}"
fi

# The rule can fail: a planted include of node/ in limiter/ is caught (on a copy, never the tree).
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/limiter"
printf '#include "node/api/metrics.h"\n' >"$scratch/limiter/planted.h"
if (cd "$scratch" && check limiter 'base|limiter' >/dev/null); then
  echo "FAIL: a planted include of node/ in limiter/ was not caught"
  failed=1
fi
mkdir -p "$scratch/node/forward"
printf '#include "node/cluster/cluster.h"\n' >"$scratch/node/forward/planted.h"
if (cd "$scratch" && check node/forward 'node/(forward|peer|api)' 'node/' >/dev/null); then
  echo "FAIL: a planted include of node/cluster/ in node/forward/ was not caught"
  failed=1
fi
exit $failed
