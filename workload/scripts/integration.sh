#!/usr/bin/env bash
# The integration tests: tiny randomly initialised models (a Llama; an InternVL that the
# captioner example runs on) loaded with the real transformers and PyTorch on CPU (and,
# where CUDA is present, on the GPU with the full planned arguments). They live outside scripts/test.sh because torch from PyPI brings
# several GB of CUDA wheels; this script keeps them in their own virtual environment,
# .venv/workload-integration, rebuilt only when what it installs changes.
#
#   bash workload/scripts/integration.sh [pytest args...]
#
# PYTHON picks the interpreter that creates the environment (3.11+).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="$root/.venv/workload-integration"
requirements="$root/workload/requirements-test.txt"
# accelerate: transformers needs it for device_map="auto"; torchvision and Pillow: the
# captioner example's test (transformers' InternVL processor and its images).
packages=("transformers>=4.56" accelerate torchvision pillow)
stamp="$venv/.installed"
want="${packages[*]} $(sha256sum "$requirements" | cut -d' ' -f1)"
pip=("$venv/bin/pip" install --quiet --disable-pip-version-check --no-input)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "integration: installing torch, ${packages[*]} and pytest into .venv/workload-integration" >&2
  rm -rf "$venv"
  "${PYTHON:-python3}" -m venv "$venv"
  # The CPU-only build is far smaller; its index is not reachable everywhere, so plain
  # PyPI (with CUDA wheels) is the fallback.
  "${pip[@]}" torch --index-url https://download.pytorch.org/whl/cpu 2>/dev/null \
    || "${pip[@]}" torch
  "${pip[@]}" "${packages[@]}" -r "$requirements"
  echo "$want" > "$stamp"
fi
"${pip[@]}" --no-deps --force-reinstall "$root/workload"
cd "$root"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider workload/tests/integration "$@"
