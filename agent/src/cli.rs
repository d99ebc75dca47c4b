//! Command-line flags.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
pub use vramfit_runtime::logging::LogFormat;

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

    /// How often to read the node again and put back `vramfit.io/` labels someone else
    /// changed, removed or added: `<n>s`, `<n>m` or `<n>h` (a bare number is seconds),
    /// 1 s to 24 h. One GET each time; a write only when something differs.
    #[arg(long, default_value = "10m", value_name = "DURATION", value_parser = parse_repair_interval)]
    pub repair_interval: RepairInterval,

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

/// `--repair-interval`: a duration from 1 s to 24 h.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RepairInterval(pub Duration);

/// The longest `--repair-interval`.
pub const MAX_REPAIR_INTERVAL: Duration = Duration::from_secs(86_400);

fn parse_repair_interval(text: &str) -> Result<RepairInterval, String> {
    let text = text.trim();
    let (number, unit) = match text.char_indices().last() {
        Some((at, 's')) => (&text[..at], 1),
        Some((at, 'm')) => (&text[..at], 60),
        Some((at, 'h')) => (&text[..at], 3600),
        _ => (text, 1),
    };
    let wrong = || format!("{text:?} is not a duration like 90s, 10m or 1h");
    let count: u64 = number.parse().map_err(|_| wrong())?;
    let seconds = count.checked_mul(unit).ok_or_else(wrong)?;
    let duration = Duration::from_secs(seconds);
    if duration.is_zero() || duration > MAX_REPAIR_INTERVAL {
        return Err(format!("{text:?} is outside 1s to 24h"));
    }
    Ok(RepairInterval(duration))
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
        assert_eq!(args.repair_interval.0, Duration::from_secs(600));
    }

    #[test]
    fn repair_interval_takes_seconds_minutes_and_hours_within_a_day() {
        let parse = |text: &str| {
            Args::try_parse_from(["vramfit-agent", "--repair-interval", text])
                .map(|args| args.repair_interval.0.as_secs())
        };
        assert_eq!(parse("90s").unwrap(), 90);
        assert_eq!(parse("45").unwrap(), 45);
        assert_eq!(parse("10m").unwrap(), 600);
        assert_eq!(parse("24h").unwrap(), 86_400);
        for wrong in [
            "0s",
            "0",
            "25h",
            "m",
            "",
            "-5m",
            "1.5m",
            "10 m",
            "10d",
            "99999999999999999999h",
        ] {
            assert!(parse(wrong).is_err(), "{wrong:?} accepted");
        }
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
