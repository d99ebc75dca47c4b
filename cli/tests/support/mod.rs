//! What the CLI's integration tests share: running the `vramfit` binary.
use std::io::Write as _;
use std::process::{Command, Output, Stdio};

/// Runs `vramfit args…` with `stdin` piped in, without the Hub's environment (`HF_ENDPOINT`,
/// `HF_TOKEN`: the Hub is reached only through flags), and waits for it. The CLI may stop
/// reading early (a file past the size limit): a broken pipe is fine.
pub fn vramfit(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_vramfit"))
        .args(args)
        .env_remove("HF_ENDPOINT")
        .env_remove("HF_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        let _ = pipe.write_all(text.as_bytes());
    }
    child.wait_with_output().unwrap()
}
