//! Command-line flags.
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
pub use vramfit_telemetry::LogFormat;

/// vramfit node agent: reads the node's GPUs through NVML (or a fixture file) and keeps its
/// `vramfit.io/` labels true.
#[derive(Clone, Debug, Parser)]
#[command(name = "vramfit-agent", version, about)]
pub struct Args {
    /// The node to label (set from `spec.nodeName` through the downward API). Needed unless
    /// `--once --print`.
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,

    /// Read GPUs from this YAML fixture instead of NVML, to simulate a GPU node.
    #[arg(long, value_name = "FILE")]
    pub fixture: Option<PathBuf>,

    /// Seconds between refreshes.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub interval_seconds: u64,

    /// Address of the `/healthz`, `/readyz` and `/metrics` server.
    #[arg(long, default_value = "0.0.0.0:9102")]
    pub listen: SocketAddr,

    /// Probe and write once, then exit (no HTTP server).
    #[arg(long)]
    pub once: bool,

    /// With `--once`: print the labels it would write (sorted `key=value` lines) instead of
    /// writing them; needs no cluster.
    #[arg(long, requires = "once")]
    pub print: bool,

    /// Log format on stderr; the level comes from `RUST_LOG` (default `info`).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

impl Args {
    /// The node name, if one was given and is not blank.
    pub fn node_name(&self) -> Option<&str> {
        self.node_name
            .as_deref()
            .map(str::trim)
            .filter(|name| !name.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn flags_are_consistent_and_defaults_hold() {
        Args::command().debug_assert();
        let args = Args::try_parse_from(["vramfit-agent"]).unwrap();
        assert_eq!(args.interval_seconds, 60);
        assert_eq!(args.listen.to_string(), "0.0.0.0:9102");
        assert_eq!(args.log_format, LogFormat::Text);
        assert!(!args.once && !args.print);
    }

    #[test]
    fn print_needs_once_and_interval_is_positive() {
        assert!(Args::try_parse_from(["vramfit-agent", "--print"]).is_err());
        assert!(Args::try_parse_from(["vramfit-agent", "--interval-seconds", "0"]).is_err());
        let args = Args::try_parse_from(["vramfit-agent", "--once", "--print", "--node-name", " "])
            .unwrap();
        assert_eq!(args.node_name(), None);
    }
}
