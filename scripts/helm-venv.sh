#!/usr/bin/env bash
# Create (or reuse) the virtual environment .venv/helm with the pinned packages of
# scripts/helm-check-requirements.txt (helm-sdkpy: Helm v4's library; PyYAML; the schema
# and CEL checkers), and print the path of its python on stdout.
#
#   python="$(bash scripts/helm-venv.sh)"
#
# The environment is rebuilt only when the requirements file changes. PYTHON picks the
# interpreter that creates it (3.11+). Progress goes to stderr.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv/helm"
requirements="$root/scripts/helm-check-requirements.txt"
stamp="$venv/.requirements.sha256"
want="$(sha256sum "$requirements" | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "helm-venv: installing $requirements into .venv/helm" >&2
  rm -rf "$venv"
  "${PYTHON:-python3}" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-input \
    --ignore-requires-python -r "$requirements" >&2
  echo "$want" > "$stamp"
fi
echo "$venv/bin/python"
