#!/usr/bin/env bash
# Supply-chain checks with cargo-deny and the policy in deny.toml (see docs/supply-chain.md):
# licences, sources (crates.io only) and bans (wildcards; duplicate versions are warnings).
#
#   scripts/deny.sh               licenses sources bans (needs only crates.io; part of scripts/test.sh)
#   scripts/deny.sh --advisories  the same plus advisories (fetches the RustSec advisory
#                                 database from GitHub: run it where GitHub is reachable)
#
# cargo-deny is installed at a pinned version into .tools/cargo-deny (git-ignored) with
# `cargo install --locked`, and reused while that version is there: the first run on a fresh
# machine builds it (a few minutes), later runs start at once. CARGO_DENY overrides the binary.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

version="0.20.2"
tool_root="$root/.tools/cargo-deny"

checks=(licenses sources bans)
case "${1:-}" in
  "") ;;
  --advisories) checks+=(advisories) ;;
  *) echo "usage: $0 [--advisories]" >&2; exit 2 ;;
esac

bin="${CARGO_DENY:-$tool_root/bin/cargo-deny}"
installed="$("$bin" --version 2>/dev/null || true)"
if [[ -z "${CARGO_DENY:-}" && "$installed" != "cargo-deny $version" ]]; then
  echo "installing cargo-deny $version into .tools/cargo-deny (found: ${installed:-none})" >&2
  start=$SECONDS
  cargo install --locked "cargo-deny@$version" --root "$tool_root" --force
  echo "installed cargo-deny $version in $((SECONDS - start))s" >&2
fi

# The plugin binary is called directly (as `cargo deny` runs it), so no other cargo-deny on PATH
# is picked up. --locked: Cargo.lock is what is checked, never a fresh resolution.
deny=("$bin" deny --all-features --locked)

start=$SECONDS
status=0
# Without inclusion graphs, so the duplicate-version warnings stay a short list.
"${deny[@]}" check --hide-inclusion-graph "${checks[@]}" || status=$?
if [[ $status -eq 0 ]]; then
  echo "cargo deny ${checks[*]}: ok ($("$bin" --version), $((SECONDS - start))s; duplicate versions are warnings)"
else
  # Again with errors only and their inclusion graphs: which dependency brings each one in.
  echo "== cargo deny errors with inclusion graphs" >&2
  "${deny[@]}" --log-level error check "${checks[@]}" || true
  echo "cargo deny ${checks[*]}: FAILED (exit $status; see the errors above and deny.toml)" >&2
fi
exit $status
