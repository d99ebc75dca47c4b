#!/usr/bin/env bash
# Lint and render charts/vramfit with Helm's own engine (the helm-sdkpy package bundles
# Helm v4's library; no helm binary, no cluster), validate the render against the
# Kubernetes 1.30 schema, check that deploy/ is the chart's default render and that the
# chart's CRD copy is crds/*.yaml, and that wrong values are rejected.
#
#   scripts/helm-check.sh           check (exit 1 on any failure)
#   scripts/helm-check.sh --update  copy crds/*.yaml into the chart, rewrite deploy/, check
#
# The virtual environment lives in .venv/helm (git-ignored) and is reused while
# scripts/helm-check-requirements.txt is unchanged. PYTHON picks the interpreter (3.11+).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

update=false
case "${1:-}" in
  "") ;;
  --update) update=true ;;
  *) echo "usage: $0 [--update]" >&2; exit 2 ;;
esac

venv="$root/.venv/helm"
requirements="$root/scripts/helm-check-requirements.txt"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$requirements" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "helm-check: installing $requirements into .venv/helm"
  rm -rf "$venv"
  "${PYTHON:-python3}" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-input \
    --ignore-requires-python -r "$requirements"
  echo "$want" > "$stamp"
fi

if $update; then
  bash "$root/scripts/sync-chart-crds.sh"
  exec "$venv/bin/python" "$root/scripts/helm_check.py" --update
fi
exec "$venv/bin/python" "$root/scripts/helm_check.py"
