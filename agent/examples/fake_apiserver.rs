//! A stand-in API server for running the real agent binary without a cluster (used by the
//! RSS measurement in BENCHMARKS.md):
//!
//! ```sh
//! cargo run --release -p vramfit-agent --example fake_apiserver -- 18080 /tmp/fake-kubeconfig node-1
//! KUBECONFIG=/tmp/fake-kubeconfig vramfit-agent --fixture agent/fixtures/h100-x8.yaml --node-name node-1
//! ```
#[path = "../tests/support/fake_apiserver.rs"]
mod fake_apiserver;

use std::path::PathBuf;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let port: u16 = args.next().as_deref().unwrap_or("18080").parse()?;
    let kubeconfig = PathBuf::from(args.next().unwrap_or_else(|| "/tmp/fake-kubeconfig".into()));
    let node = args.next().unwrap_or_else(|| "node-1".into());
    let (addr, recorded) = fake_apiserver::start(&node, port, Default::default()).await?;
    fake_apiserver::write_kubeconfig(&kubeconfig, addr)?;
    eprintln!(
        "fake API server for node {node} on {addr}; kubeconfig in {}",
        kubeconfig.display()
    );
    tokio::signal::ctrl_c().await?;
    for request in recorded.requests() {
        eprintln!("{request}");
    }
    Ok(())
}
