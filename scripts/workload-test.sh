#!/usr/bin/env bash
# The workload package's fast tests (workload/tests, not its integration folder, which
# needs torch: workload/scripts/integration.sh) and pyflakes over the package, in the
# virtual environment .venv/workload. The package is installed editable, so the
# environment is rebuilt only when workload/requirements-test.txt or
# workload/pyproject.toml changes. PYTHON picks the interpreter that creates it (3.11+).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv/workload"
stamp="$venv/.requirements.sha256"
want="$(cat "$root/workload/requirements-test.txt" "$root/workload/pyproject.toml" | sha256sum | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "workload-test: installing workload/ and its test requirements into .venv/workload" >&2
  rm -rf "$venv"
  "${PYTHON:-python3}" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-input \
    -r "$root/workload/requirements-test.txt" -e "$root/workload" >&2
  echo "$want" > "$stamp"
fi
cd "$root"
"$venv/bin/python" -m pyflakes workload
"$venv/bin/python" -m pytest -q -p no:cacheprovider workload/tests --ignore=workload/tests/integration
