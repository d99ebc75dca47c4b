//! The operator's HTTP endpoints: `/readyz` and `/metrics`.
use anyhow::{Result, ensure};
use vramfit_e2e::{Suite, http_get};

/// A fresh operator answers 200 on `/readyz` and serves a non-empty `/metrics`.
pub async fn operator_serves(s: &mut Suite) -> Result<()> {
    s.stop_operators();
    s.start_operator("single", &[], true).await?;
    let addr = s.operators[0].addr.clone();
    let (code, body) = http_get(&addr, "/metrics").await?;
    ensure!(code == 200, "/metrics answered {code}");
    ensure!(!body.trim().is_empty(), "/metrics is empty");
    Ok(())
}
