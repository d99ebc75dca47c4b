//! `kubectl get ij`: the CRD's printer columns, read from status.
use anyhow::Result;
use vramfit_e2e::{Suite, expect_eq, parse_table};

/// `kubectl get ij` shows the printer columns, with the phase from status.
pub async fn kubectl_columns(s: &mut Suite) -> Result<()> {
    let text = s.kubectl_get_jobs(&[]).await?;
    let rows: Vec<&str> = s.example_jobs.iter().map(String::as_str).collect();
    let table = parse_table(
        &text,
        &[
            "NAME", "PHASE", "READY", "CLASS", "GPUS", "DTYPE", "QUANT", "AGE",
        ],
        &rows,
    )?;
    for name in &rows {
        let job = s.job(name).await?;
        let phase = job
            .status
            .and_then(|st| st.phase)
            .map(|p| p.as_str().to_string());
        if let Some(cell) = table[*name].get("PHASE") {
            expect_eq(
                &format!("PHASE column of {name}"),
                Some(cell.clone()),
                phase,
            )?;
        }
    }
    Ok(())
}
