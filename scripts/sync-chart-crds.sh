#!/usr/bin/env bash
# Copy the generated CRDs (crds/*.yaml, written from the Rust types) into the chart,
# which renders them from charts/vramfit/crds-src/ (see templates/crds.yaml).
#
#   scripts/sync-chart-crds.sh          copy (and drop chart copies with no source)
#   scripts/sync-chart-crds.sh --check  only compare; exit 1 on any difference
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$root/crds"
dst="$root/charts/vramfit/crds-src"
check=false
case "${1:-}" in
  "") ;;
  --check) check=true ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

shopt -s nullglob
sources=("$src"/*.yaml)
if [ ${#sources[@]} -eq 0 ]; then
  echo "sync-chart-crds: no CRD in $src/*.yaml; generate them from the Rust types first" >&2
  exit 1
fi

drift=0
mkdir -p "$dst"
for f in "${sources[@]}"; do
  name="$(basename "$f")"
  if ! cmp -s "$f" "$dst/$name"; then
    if $check; then
      echo "sync-chart-crds: charts/vramfit/crds-src/$name differs from crds/$name" >&2
      drift=1
    else
      cp "$f" "$dst/$name"
      echo "sync-chart-crds: copied crds/$name"
    fi
  fi
done
for f in "$dst"/*.yaml; do
  name="$(basename "$f")"
  if [ ! -e "$src/$name" ]; then
    if $check; then
      echo "sync-chart-crds: charts/vramfit/crds-src/$name has no source in crds/" >&2
      drift=1
    else
      rm "$f"
      echo "sync-chart-crds: removed charts/vramfit/crds-src/$name (no source in crds/)"
    fi
  fi
done
if [ "$drift" -ne 0 ]; then
  echo "sync-chart-crds: run scripts/sync-chart-crds.sh (or scripts/helm-check.sh --update)" >&2
  exit 1
fi
