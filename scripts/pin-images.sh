#!/usr/bin/env bash
# A release's step after pushing the images: pin them by digest in the chart's values.yaml
# and re-render deploy/ (and install-tests/rendered/) from it, so that both install paths
# pull exactly the images the release built (docker/README.md, "Releasing").
#
#   scripts/pin-images.sh sha256:<operator digest> sha256:<agent digest> [sha256:<cache agent digest>]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ $# -ne 2 ] && [ $# -ne 3 ]; then
  echo "usage: $0 OPERATOR_DIGEST AGENT_DIGEST [CACHE_AGENT_DIGEST]   (each sha256:<64 hex digits>)" >&2
  exit 2
fi
python3 "$root/scripts/pin_images.py" --operator "$1" --agent "$2" ${3:+--cache-agent "$3"}
exec bash "$root/scripts/helm-check.sh" --update
