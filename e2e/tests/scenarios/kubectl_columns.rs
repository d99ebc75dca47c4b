//! `kubectl get ij`: the CRD's printer columns, read from status.
use anyhow::Result;
use vramfit_e2e::{Suite, cell, expect_eq, parse_table};

/// `kubectl get ij` shows the printer columns, with the phase from status and, for a served
/// job, READY as `ready/desired` (empty for a batch job).
pub async fn kubectl_columns(s: &mut Suite) -> Result<()> {
    let text = s.kubectl_get_jobs(&[]).await?;
    let rows: Vec<&str> = s.example_jobs.iter().map(String::as_str).collect();
    parse_table(
        &text,
        &[
            "NAME", "PHASE", "READY", "CLASS", "GPUS", "DTYPE", "QUANT", "WAITING", "AGE",
        ],
        &rows,
    )?;
    for name in &rows {
        let status = s.job(name).await?.status.unwrap_or_default();
        let phase = status
            .phase
            .map(|p| p.as_str().to_string())
            .unwrap_or_default();
        expect_eq(
            &format!("PHASE column of {name}"),
            cell(&text, "PHASE", name)?,
            phase,
        )?;
        expect_eq(
            &format!("READY column of {name}"),
            cell(&text, "READY", name)?,
            status.ready.unwrap_or_default(),
        )?;
    }
    Ok(())
}
