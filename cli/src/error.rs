//! Errors the CLI reports as one line on stderr, with exit code 2 ([`EXIT_BAD_INPUT`]).
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a valid {kind} manifest: {message}")]
    Parse {
        path: PathBuf,
        kind: &'static str,
        message: String,
    },
    #[error("{path}: larger than 3 MiB, the API server's limit for one request; not read further")]
    TooLarge { path: PathBuf },
    #[error(
        "{path}: nested more than {max} levels deep at line {line}; a manifest nests about ten",
        max = crate::nesting::MAX_DEPTH
    )]
    TooDeep { path: PathBuf, line: usize },
    #[error("{path}: the API server would refuse this {kind}: {}", one_line(.problems))]
    Refused {
        path: PathBuf,
        kind: &'static str,
        problems: Vec<String>,
    },
    #[error("{path}: invalid spec: {message}")]
    InvalidSpec { path: PathBuf, message: String },
    #[error("unknown node class {name:?}; known classes: {known}")]
    UnknownClass { name: String, known: String },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot serialize output: {0}")]
    Serialize(String),
    #[error("{0}")]
    Usage(String),
    #[error("Kubernetes API: {0}")]
    Kube(String),
    /// A checkpoint that could not be read (the message names the file or the Hub).
    #[error("{0}")]
    Model(String),
}

/// Exit code for bad input: a file that cannot be read, parsed or admitted, an invalid spec,
/// an unknown class, a bad argument.
pub const EXIT_BAD_INPUT: u8 = 2;
/// Exit code of `vramfit plan` when the job is valid but no class it was planned for can run
/// it (the plan is still printed).
pub const EXIT_NO_CLASS_CAN_RUN: u8 = 3;

/// At most five problems on one line, and how many more there are.
fn one_line(problems: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut line = problems
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    if problems.len() > SHOWN {
        line.push_str(&format!(
            "; and {} more",
            problems.len().saturating_sub(SHOWN)
        ));
    }
    line
}
