//! `kubectl` (or `$KUBECTL`), run with the suite's KUBECONFIG, and reading its tables.
use std::collections::BTreeMap;
use std::process::Command;

use anyhow::{Context as _, Result, anyhow, bail};

use crate::Suite;

/// Runs `kubectl` (or `$KUBECTL`) with `args` and the suite's KUBECONFIG; its stdout, or an
/// error with its stderr.
pub fn kubectl(args: &[&str]) -> Result<String> {
    let program = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let output = Command::new(&program)
        .args(args)
        .output()
        .with_context(|| {
            format!("running {program} (set KUBECTL to its path if it is not on PATH)")
        })?;
    if !output.status.success() {
        bail!(
            "kubectl {} failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Checks that `kubectl get` output has a header with every column in `columns` and a row
/// starting with each of `rows`; returns the rows keyed by their first column, each cell read
/// by the header's column positions ([`cell`]).
pub fn parse_table(
    output: &str,
    columns: &[&str],
    rows: &[&str],
) -> Result<BTreeMap<String, BTreeMap<String, String>>> {
    let mut lines = output.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<&str> = lines
        .next()
        .ok_or_else(|| anyhow!("kubectl printed nothing"))?
        .split_whitespace()
        .collect();
    for column in columns {
        if !header.contains(column) {
            bail!("expected column {column} in the header, saw {header:?}");
        }
    }
    let mut table = BTreeMap::new();
    for line in lines {
        let Some(first) = line.split_whitespace().next() else {
            continue;
        };
        // By the header's positions: an empty cell (a column only some rows fill) does not
        // shift the cells after it.
        let row = header
            .iter()
            .map(|h| Ok((h.to_string(), cell(output, h, first)?)))
            .collect::<Result<BTreeMap<String, String>>>()?;
        table.insert(first.to_string(), row);
    }
    for row in rows {
        if !table.contains_key(*row) {
            bail!(
                "expected a row for {row}, saw rows {:?}",
                table.keys().collect::<Vec<_>>()
            );
        }
    }
    Ok(table)
}

/// The cell of `column` in the row whose first cell is `row`, read by the header's column
/// positions (kubectl aligns its columns), so empty cells do not shift the others.
pub fn cell(output: &str, column: &str, row: &str) -> Result<String> {
    let mut lines = output.lines().filter(|l| !l.trim().is_empty());
    let header = lines
        .next()
        .ok_or_else(|| anyhow!("kubectl printed nothing"))?;
    let start = header
        .match_indices(column)
        .map(|(i, _)| i)
        .find(|&i| i == 0 || header[..i].ends_with(' '))
        .ok_or_else(|| anyhow!("no column {column} in {header:?}"))?;
    let end = header[start..]
        .find(' ')
        .map(|n| start + n)
        .and_then(|after| header[after..].find(|c: char| c != ' ').map(|n| after + n))
        .unwrap_or(usize::MAX);
    let line = lines
        .find(|l| l.split_whitespace().next() == Some(row))
        .ok_or_else(|| anyhow!("no row {row}"))?;
    let text = line.get(start..end.min(line.len())).unwrap_or_default();
    Ok(text.trim().to_string())
}

impl Suite {
    /// `kubectl get ij -n <test namespace> <extra…>`; prints its output indented and returns
    /// it.
    pub async fn kubectl_get_jobs(&self, extra: &[&str]) -> Result<String> {
        let mut args: Vec<String> = ["get", "ij", "-n", &self.ns].map(String::from).to_vec();
        args.extend(extra.iter().map(|a| a.to_string()));
        let text = tokio::task::spawn_blocking(move || {
            kubectl(&args.iter().map(String::as_str).collect::<Vec<_>>())
        })
        .await??;
        print!(
            "{}",
            text.lines()
                .map(|l| format!("     {l}\n"))
                .collect::<String>()
        );
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_tables_are_read_by_header() {
        let out = "NAME      PHASE       CLASS        GPUS   DTYPE      QUANT   AGE\n\
                   chat      Scheduled   a10g-x1      1      bfloat16   none    5s\n\
                   pending   Pending\n";
        let table = parse_table(
            out,
            &["PHASE", "CLASS", "GPUS", "DTYPE", "QUANT"],
            &["chat", "pending"],
        )
        .unwrap();
        assert_eq!(table["chat"]["PHASE"], "Scheduled");
        assert_eq!(table["chat"]["GPUS"], "1");
        assert_eq!(table["pending"]["PHASE"], "Pending");
        assert_eq!(
            table["pending"]["GPUS"], "",
            "an empty cell is empty, not shifted"
        );
        let gap = "NAME   PHASE     READY   WAITING   AGE\n\
                   chat   Running   3/3               1s\n";
        let table = parse_table(gap, &["READY", "WAITING"], &["chat"]).unwrap();
        assert_eq!(table["chat"]["READY"], "3/3");
        assert_eq!(table["chat"]["WAITING"], "");
        assert_eq!(table["chat"]["AGE"], "1s");
        assert!(
            parse_table(out, &["NODE"], &[])
                .unwrap_err()
                .to_string()
                .contains("NODE")
        );
        assert!(parse_table(out, &["PHASE"], &["gone"]).is_err());
        let wide = "NAME   PHASE     READY   POD   ENDPOINT                  AGE\n\
                    chat   Running   2/3           http://chat.ml.svc:8000   5s\n";
        assert_eq!(cell(wide, "READY", "chat").unwrap(), "2/3");
        assert_eq!(cell(wide, "POD", "chat").unwrap(), "");
        assert_eq!(
            cell(wide, "ENDPOINT", "chat").unwrap(),
            "http://chat.ml.svc:8000"
        );
    }
}
