//! The binary's command line, run as a process: what it prints and how it fails.
// Test and benchmark code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
use std::path::PathBuf;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_vramfit-agent");

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// Runs the agent with no cluster configuration and no node name from the environment.
fn agent(args: &[&str]) -> Output {
    let home = std::env::temp_dir().join(format!("vramfit-agent-cli-home-{}", std::process::id()));
    Command::new(BIN)
        .args(args)
        .env_remove("NODE_NAME")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .env("KUBECONFIG", home.join("no-such-kubeconfig"))
        .env("HOME", &home)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn assert_no_panic(output: &Output) {
    let err = stderr(output);
    assert!(
        !err.contains("panicked") && !err.contains("RUST_BACKTRACE"),
        "{err}"
    );
}

#[test]
fn once_print_with_a_fixture_prints_sorted_labels_and_needs_no_cluster() {
    let output = agent(&[
        "--once",
        "--print",
        "--fixture",
        fixture("a10g-x1.yaml").to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "vramfit.io/gpu.bf16=true\n\
         vramfit.io/gpu.compute-capability=8.6\n\
         vramfit.io/gpu.count=1\n\
         vramfit.io/gpu.cuda-driver=12.4\n\
         vramfit.io/gpu.driver=550.54.15\n\
         vramfit.io/gpu.family=ampere\n\
         vramfit.io/gpu.flash-attention=true\n\
         vramfit.io/gpu.memory-mib=23028\n\
         vramfit.io/gpu.mig=unsupported\n\
         vramfit.io/gpu.mixed=false\n\
         vramfit.io/gpu.present=true\n\
         vramfit.io/gpu.product=NVIDIA-A10G\n\
         vramfit.io/gpu.tier=datacenter_mid_memory\n"
    );
}

#[test]
fn writing_without_a_node_name_is_one_clear_error_with_exit_code_2() {
    let h100 = fixture("h100-x8.yaml");
    for args in [
        vec!["--once", "--fixture", h100.to_str().unwrap()],
        vec!["--fixture", h100.to_str().unwrap()],
        vec!["--once", "--node-name", "  "],
    ] {
        let output = agent(&args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
        assert_no_panic(&output);
        let err = stderr(&output);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with("error: no node name: pass --node-name or set NODE_NAME"),
            "{err}"
        );
        assert!(stdout(&output).is_empty());
    }
}

#[test]
fn a_malformed_or_missing_fixture_is_one_clear_line_with_exit_code_2() {
    let dir = std::env::temp_dir();
    let bad = dir.join(format!(
        "vramfit-agent-bad-fixture-{}.yaml",
        std::process::id()
    ));
    std::fs::write(&bad, "gpus:\n  - name: NVIDIA A10G\n    memoryMiB: lots\n").unwrap();
    let missing = dir.join("vramfit-agent-no-such-fixture.yaml");
    for (path, expected) in [(&bad, "memoryMiB"), (&missing, "No such file")] {
        let output = agent(&["--once", "--print", "--fixture", path.to_str().unwrap()]);
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert_no_panic(&output);
        let err = stderr(&output);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with(&format!("error: fixture {}: ", path.display())),
            "{err}"
        );
        assert!(err.contains(expected), "{err}");
    }
    let _ = std::fs::remove_file(&bad);
}

#[test]
fn without_a_cluster_once_fails_cleanly_with_exit_code_1() {
    let output = agent(&[
        "--once",
        "--node-name",
        "n1",
        "--fixture",
        fixture("t4-x1.yaml").to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert_no_panic(&output);
    assert!(
        stderr(&output).contains("error: cannot create a Kubernetes client"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn usage_errors_exit_with_code_2() {
    for args in [
        vec!["--print"],
        vec!["--interval-seconds", "0"],
        vec!["--listen", "nowhere"],
        vec!["--log-format", "xml"],
    ] {
        let output = agent(&args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        assert_no_panic(&output);
    }
}
