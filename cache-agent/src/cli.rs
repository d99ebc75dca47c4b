//! Command-line flags.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
pub use vramfit_runtime::logging::LogFormat;

/// vramfit node cache agent: downloads the models its node's ModelCache asks for into the
/// node-local cache, evicting the least recently used ones to stay within a byte budget, and
/// writes what the cache holds into the ModelCache's status.
#[derive(Clone, Debug, Parser)]
#[command(name = "vramfit-cache-agent", version, about)]
pub struct Args {
    /// The node this agent runs on (set from `spec.nodeName` through the downward API): its
    /// ModelCache has the node's name.
    #[arg(long, env = "NODE_NAME", value_parser = non_blank)]
    pub node_name: String,

    /// The cache root on the node's disk (a hostPath).
    #[arg(long, default_value = "/var/lib/vramfit/cache", value_name = "DIR")]
    pub cache_root: PathBuf,

    /// Bytes the cache may hold; the least recently used models no pod mounts are evicted to
    /// stay within it.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub budget_bytes: u64,

    /// The Hugging Face Hub or a mirror.
    #[arg(long, default_value = vramfit_hub::DEFAULT_ENDPOINT, value_name = "URL")]
    pub hub_endpoint: String,

    /// A file holding the Hub token (a mounted Secret key). Used only for the namespaces of
    /// `--hub-token-namespaces` and the repositories of `--hub-token-repos`.
    #[arg(long, value_name = "FILE")]
    pub hub_token_file: Option<PathBuf>,

    /// The namespaces whose jobs' models are read with the token (comma-separated). None:
    /// every download is anonymous.
    #[arg(long, value_delimiter = ',', value_name = "NAMESPACE,...")]
    pub hub_token_namespaces: Vec<String>,

    /// The repositories the token is used for: `owner/name` or `owner/*` (comma-separated;
    /// none: every repository).
    #[arg(long, value_delimiter = ',', value_name = "REPO,...", value_parser = repo_pattern)]
    pub hub_token_repos: Vec<String>,

    /// Address of the `/healthz`, `/readyz` and `/metrics` server.
    #[arg(long, default_value = "0.0.0.0:8082")]
    pub metrics_addr: SocketAddr,

    /// Log format on stderr; the level comes from `RUST_LOG` (default `info`).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Seconds between passes when nothing changes (the status heartbeat is written at least
    /// this often).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub resync_seconds: u64,

    /// Give the cache root folder itself (not what it holds) to `UID:GID`, creating it if
    /// needed, then exit. The chart's init container runs this as root with CAP_CHOWN alone,
    /// so that the agent runs as a non-root user on a hostPath the kubelet made.
    #[arg(long, value_name = "UID:GID", value_parser = owner)]
    pub prepare_root: Option<Owner>,

    /// Make `<cache-root>/served` a read-only bind mount of `<cache-root>/models` (the folder
    /// pods mount models from), then exit. The chart's privileged init container runs this
    /// with Bidirectional mount propagation (docs/model-cache.md, "Threat model").
    #[arg(long, conflicts_with = "prepare_root")]
    pub serve_read_only: bool,

    /// Hours between two full re-verifications of the complete models (every file hashed
    /// again); one always runs after the agent starts. 0: only that one.
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u64).range(0..=8760))]
    pub reverify_hours: u64,

    /// Longest time one model's fetch may take before the agent moves on (the files in place
    /// and the partial downloads are kept: the next try resumes).
    #[arg(long, default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..=604_800))]
    pub fetch_deadline_seconds: u64,
}

/// `--prepare-root`: the owner to give the cache root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

fn owner(text: &str) -> Result<Owner, String> {
    let wrong = || format!("{text:?} is not UID:GID");
    let (uid, gid) = text.split_once(':').ok_or_else(wrong)?;
    Ok(Owner {
        uid: uid.parse().map_err(|_| wrong())?,
        gid: gid.parse().map_err(|_| wrong())?,
    })
}

impl Args {
    /// `--resync-seconds` as a duration.
    pub fn resync(&self) -> Duration {
        Duration::from_secs(self.resync_seconds)
    }

    /// `--reverify-hours` as a period; `None` for 0.
    pub fn reverify_every(&self) -> Option<Duration> {
        (self.reverify_hours > 0).then(|| Duration::from_secs(self.reverify_hours * 3600))
    }
}

fn non_blank(text: &str) -> Result<String, String> {
    let text = text.trim();
    if text.is_empty() {
        Err("is empty".to_string())
    } else {
        Ok(text.to_string())
    }
}

fn repo_pattern(text: &str) -> Result<String, String> {
    let text = text.trim();
    vramfit_hub::TokenScope::new([], [text.to_string()])
        .map(|_| text.to_string())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn flags_are_consistent_and_defaults_hold() {
        Args::command().debug_assert();
        let args = Args::try_parse_from([
            "vramfit-cache-agent",
            "--node-name",
            "gpu-1",
            "--budget-bytes",
            "1000",
        ])
        .unwrap();
        assert_eq!(args.node_name, "gpu-1");
        assert_eq!(args.cache_root, PathBuf::from("/var/lib/vramfit/cache"));
        assert_eq!(args.budget_bytes, 1000);
        assert_eq!(args.hub_endpoint, "https://huggingface.co");
        assert_eq!(args.hub_token_file, None);
        assert!(args.hub_token_namespaces.is_empty() && args.hub_token_repos.is_empty());
        assert_eq!(args.metrics_addr.to_string(), "0.0.0.0:8082");
        assert_eq!(args.log_format, LogFormat::Text);
        assert_eq!(args.resync(), Duration::from_secs(60));
        assert_eq!(args.prepare_root, None);
        assert_eq!(args.reverify_every(), Some(Duration::from_secs(24 * 3600)));
        assert_eq!(args.fetch_deadline_seconds, 3600);
    }

    #[test]
    fn reverify_hours_of_zero_turn_the_schedule_off() {
        let args = Args::try_parse_from([
            "vramfit-cache-agent",
            "--node-name=n",
            "--budget-bytes=1",
            "--reverify-hours=0",
            "--fetch-deadline-seconds=600",
        ])
        .unwrap();
        assert_eq!(args.reverify_every(), None);
        assert_eq!(args.fetch_deadline_seconds, 600);
        assert!(
            Args::try_parse_from([
                "vramfit-cache-agent",
                "--node-name=n",
                "--budget-bytes=1",
                "--fetch-deadline-seconds=0",
            ])
            .is_err()
        );
    }

    #[test]
    fn prepare_root_takes_a_numeric_owner() {
        let parse = |owner: &str| {
            Args::try_parse_from([
                "vramfit-cache-agent",
                "--node-name=n",
                "--budget-bytes=1",
                &format!("--prepare-root={owner}"),
            ])
            .map(|a| a.prepare_root)
        };
        assert_eq!(
            parse("65532:65532").unwrap(),
            Some(Owner {
                uid: 65532,
                gid: 65532
            })
        );
        for wrong in ["65532", "a:b", ":1", "1:", "-1:0"] {
            assert!(parse(wrong).is_err(), "{wrong:?} accepted");
        }
    }

    #[test]
    fn node_name_and_a_positive_budget_are_required() {
        let parse = |extra: &[&str]| {
            let mut argv = vec!["vramfit-cache-agent"];
            argv.extend_from_slice(extra);
            Args::try_parse_from(argv)
        };
        assert!(parse(&["--budget-bytes", "1"]).is_err() || std::env::var("NODE_NAME").is_ok());
        assert!(parse(&["--node-name", "n"]).is_err());
        assert!(parse(&["--node-name", "n", "--budget-bytes", "0"]).is_err());
        assert!(parse(&["--node-name", " ", "--budget-bytes", "1"]).is_err());
        assert!(
            parse(&[
                "--node-name",
                "n",
                "--budget-bytes",
                "1",
                "--resync-seconds",
                "0"
            ])
            .is_err()
        );
    }

    #[test]
    fn token_namespaces_and_repos_are_comma_lists_of_valid_patterns() {
        let args = Args::try_parse_from([
            "vramfit-cache-agent",
            "--node-name=n",
            "--budget-bytes=1",
            "--hub-token-namespaces=team-a,team-b",
            "--hub-token-repos=org/*,other/model",
        ])
        .unwrap();
        assert_eq!(args.hub_token_namespaces, ["team-a", "team-b"]);
        assert_eq!(args.hub_token_repos, ["org/*", "other/model"]);
        assert!(
            Args::try_parse_from([
                "vramfit-cache-agent",
                "--node-name=n",
                "--budget-bytes=1",
                "--hub-token-repos=org/x/*",
            ])
            .is_err()
        );
    }
}
