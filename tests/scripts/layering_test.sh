#!/usr/bin/env bash
# The layering rules of docs/architecture.md, checked on the sources (issue 36): dependencies point inwards
# -- base/ (Status, Published) includes only base/; limiter/ only base/ and limiter/; ring/ those and ring/;
# storage/ those and storage/; replication/ nothing of node/ or client/; client/ nothing of node/ -- and the Prometheus text
# format's `# TYPE` line is written in one place (node/api/metrics.cc). Fails naming each offending line.
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
failed=0

# check DIR ALLOWED_REGEX: every project include in DIR's sources names a folder matching ALLOWED_REGEX.
check() {
  local dir=$1 allowed=$2 bad
  bad=$(grep -rnE '^#include "[a-z_]+/' "$dir" --include='*.cc' --include='*.h' |
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
exit $failed
