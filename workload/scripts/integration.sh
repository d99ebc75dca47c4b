#!/usr/bin/env bash
# The integration tests: tiny randomly initialised models (a Llama; an InternVL that the
# captioner example runs on) loaded with the real transformers and PyTorch on CPU (and,
# where CUDA is present, on the GPU with the full planned arguments), and a tiny Llama
# fine-tuned for a few steps with the training arguments the package builds (transformers'
# Trainer and peft). Every name the package passes to BitsAndBytesConfig, LoraConfig and
# TrainingArguments is checked against the signatures of the versions
# docs/runtime-contracts.md pins, which is what this environment installs. They live
# outside scripts/test.sh because torch from PyPI brings
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
# The versions docs/runtime-contracts.md pins for fine-tuning (transformers, peft,
# bitsandbytes: the names the training arguments use are checked against them) on PyTorch
# 2.8. accelerate: transformers needs it for device_map="auto" and the Trainer; torchvision
# and Pillow: the captioner example's test (transformers' InternVL processor and its images).
torch_version="torch==2.8.0"
packages=("transformers==5.24.0" "peft==0.21.2" "bitsandbytes==0.48.1" "accelerate==1.10.1"
  "torchvision==0.23.0" pillow)
stamp="$venv/.installed"
want="$torch_version ${packages[*]} $(sha256sum "$requirements" | cut -d' ' -f1)"
pip=("$venv/bin/pip" install --quiet --disable-pip-version-check --no-input)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "integration: installing torch, ${packages[*]} and pytest into .venv/workload-integration" >&2
  rm -rf "$venv"
  "${PYTHON:-python3}" -m venv "$venv"
  # The CPU-only build is far smaller; its index is not reachable everywhere, so plain
  # PyPI (with CUDA wheels) is the fallback.
  "${pip[@]}" "$torch_version" --index-url https://download.pytorch.org/whl/cpu 2>/dev/null \
    || "${pip[@]}" "$torch_version"
  "${pip[@]}" "${packages[@]}" -r "$requirements"
  echo "$want" > "$stamp"
fi
"${pip[@]}" --no-deps --force-reinstall "$root/workload"
cd "$root"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider workload/tests/integration "$@"
