//! What the CLI's test binaries share.
use std::process::{Command, Output};

/// `vramfit ARGS` from the repository root, with no cluster anywhere (none of the commands
/// tested with it may look for one).
pub fn vramfit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vramfit"))
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .args(args)
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .expect("the vramfit binary runs")
}
