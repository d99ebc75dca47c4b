#!/usr/bin/env bash
# Lint and render charts/vramfit with Helm's own engine (the helm-sdkpy package bundles
# Helm v4's library; no helm binary, no cluster), validate the render against the
# Kubernetes 1.30 schema, check that deploy/ is the chart's default render and that the
# chart's CRD copy is crds/*.yaml, and that wrong values are rejected; and that the values
# table of charts/vramfit/README.md is the one scripts/chart_values_table.py generates from
# values.yaml and values.schema.json, with every value documented.
#
#   scripts/helm-check.sh           check (exit 1 on any failure)
#   scripts/helm-check.sh --update  copy crds/*.yaml into the chart, rewrite deploy/ and the
#                                   README's values table, check
#
# scripts/helm-venv.sh sets up the virtual environment in .venv/helm (git-ignored), reused
# while scripts/helm-check-requirements.txt is unchanged. PYTHON picks the interpreter (3.11+).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

update=false
case "${1:-}" in
  "") ;;
  --update) update=true ;;
  *) echo "usage: $0 [--update]" >&2; exit 2 ;;
esac

python="$(bash "$root/scripts/helm-venv.sh")"

# The values table: its generator's own tests, then the table itself.
values_status=0
"$python" -m unittest -q scripts/chart_values_table_test.py 2>&1 | tail -n 3 || values_status=1
if $update; then
  bash "$root/scripts/sync-chart-crds.sh"
  "$python" "$root/scripts/chart_values_table.py" --update || values_status=1
  "$python" "$root/scripts/helm_check.py" --update || exit 1
else
  "$python" "$root/scripts/chart_values_table.py" || values_status=1
  "$python" "$root/scripts/helm_check.py" || exit 1
fi
exit $values_status
