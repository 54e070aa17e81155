#!/usr/bin/env bash
# examples/prometheus/alerts.yaml passes `promtool check rules`, and `promtool test rules` on the fixture
# tests/prometheus/alerts_test.yaml fires each alert on the series that should raise it (and no other).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
command -v promtool >/dev/null || { echo "FAIL: promtool is missing (scripts/bootstrap installs it)" >&2; exit 1; }
promtool check rules "$root/examples/prometheus/alerts.yaml"
promtool test rules "$root/tests/prometheus/alerts_test.yaml"
echo "PASS: alert rules checked and tested"
