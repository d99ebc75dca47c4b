//! Where the suite runs: whether it can (KUBECONFIG), the names and labels it gives what it
//! creates, the workspace it reads, and the clock it writes.
use std::path::{Path, PathBuf};

use k8s_openapi::jiff::Timestamp;

/// What every skipped run prints on stderr.
pub const SKIP_MESSAGE: &str = "SKIPPED: KUBECONFIG is not set — the e2e suite needs a real cluster \
(kind, k3d, or any cluster with a scheduler and a controller manager); see e2e/README.md";

/// Field manager of everything the suite writes.
pub const MANAGER: &str = "vramfit-e2e";

/// Prefix of every node and namespace the suite creates.
pub const PREFIX: &str = "vramfit-e2e-";

/// Label on every object the suite creates, valued with the run id (for cleanup).
pub const RUN_LABEL: &str = "vramfit.io/e2e-run";

/// Why the suite cannot run here, if it cannot.
pub fn skip_reason() -> Option<&'static str> {
    match std::env::var_os("KUBECONFIG") {
        Some(v) if !v.is_empty() => None,
        _ => Some(SKIP_MESSAGE),
    }
}

/// The workspace root (the parent of `e2e/`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e/ has a parent")
        .to_path_buf()
}

/// Cargo's target directory: `CARGO_TARGET_DIR`, or `target/` in the workspace.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// A short id unique enough to keep two runs on one cluster apart.
pub fn run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "{:x}",
        (nanos as u64 ^ ((std::process::id() as u64) << 32)) & 0xff_ffff
    )
}

/// Now, as the API server writes times (RFC 3339).
pub fn now() -> String {
    Timestamp::now().to_string()
}

/// `ago` before now, as the API server writes times.
pub fn started_ago(ago: std::time::Duration) -> String {
    let ago = k8s_openapi::jiff::SignedDuration::try_from(ago).unwrap_or_default();
    (Timestamp::now() - ago).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_message_says_why() {
        assert!(SKIP_MESSAGE.starts_with("SKIPPED: KUBECONFIG is not set"));
        assert!(SKIP_MESSAGE.contains("e2e/README.md"));
    }
}
