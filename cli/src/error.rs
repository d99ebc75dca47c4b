//! Errors the CLI reports as one line on stderr, with exit code 2.
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
}
