//! Command-line flags (a contract with the Helm chart: keep names and defaults).
use std::net::SocketAddr;

use clap::Parser;
pub use vramfit_runtime::logging::LogFormat;

use crate::settings::GroupSpread;
use crate::stores::namespaces::WatchNamespaces;

/// vramfit operator: plans InferenceJobs for the GPU class they land on and runs their pods.
#[derive(Clone, Debug, Parser)]
#[command(name = "vramfit-operator", version, about)]
pub struct Args {
    /// Address of the `/metrics`, `/healthz` and `/readyz` server.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,

    /// Run only while holding a Lease, so that several replicas can run.
    #[arg(long)]
    pub leader_election: bool,

    /// Name of the Lease.
    #[arg(long, default_value = "vramfit-operator")]
    pub lease_name: String,

    /// Namespace of the Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub lease_namespace: String,

    /// The Hugging Face Hub, or a mirror or air-gapped proxy of it, where `model.huggingFace`
    /// repositories are read (config.json, the safetensors index and headers; never weights).
    #[arg(long, env = "VRAMFIT_HUB_ENDPOINT", default_value = vramfit_hub::DEFAULT_ENDPOINT)]
    pub hub_endpoint: String,
    /// A Secret in the operator's own namespace whose `token` key holds a Hub token, for
    /// private and gated models. Never read from a job's namespace.
    #[arg(long, env = "VRAMFIT_HUB_TOKEN_SECRET")]
    pub hub_token_secret: Option<String>,
    /// The namespaces whose jobs read the Hub with the token (comma-separated, e.g.
    /// `team-a,team-b`). Unset or empty: none; every read is anonymous.
    #[arg(
        long,
        value_name = "NAMESPACES",
        default_value = "",
        hide_default_value = true,
        value_parser = WatchNamespaces::parse
    )]
    pub hub_token_namespaces: WatchNamespaces,
    /// The repositories those namespaces read with the token (comma-separated `owner/name` or
    /// `owner/*`). Unset: every repository.
    #[arg(long, value_name = "REPOS", value_delimiter = ',', value_parser = repo_pattern)]
    pub hub_token_repos: Vec<String>,
    /// Seconds one file from the Hub may take.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u16).range(1..))]
    pub hub_timeout_seconds: u16,
    /// Seconds one repository's whole read (config.json, the index and every header) may take.
    #[arg(long, default_value_t = 120, value_parser = clap::value_parser!(u16).range(1..))]
    pub hub_read_deadline_seconds: u16,
    /// Log format on stderr; the level comes from `RUST_LOG` (default `info`).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Reconciles at once. Most of a reconcile's time is spent waiting for the API server
    /// (pod apply, status write, event): at 16 a burst of 5,000 jobs created by 8 clients
    /// waited seconds for a slot (see BENCHMARKS.md).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,

    /// Threads of the async runtime. 1 (the default) runs everything on one thread: the
    /// operator needs a fraction of a core at 5,000 jobs, and one thread keeps one malloc
    /// arena (each more thread added tens of MiB of memory at that scale).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub worker_threads: u16,

    /// Reconcile only the InferenceJobs of these namespaces (comma-separated, e.g.
    /// `team-a,team-b`); empty or unset: every namespace. Jobs and their pods are then watched
    /// per namespace, and pods are written only there, so Roles in those namespaces suffice;
    /// pods, nodes and GpuNodeClasses are still read cluster-wide (GPUs any pod takes count).
    #[arg(
        long,
        env = "VRAMFIT_WATCH_NAMESPACES",
        value_name = "NAMESPACES",
        default_value = "",
        hide_default_value = true,
        value_parser = WatchNamespaces::parse
    )]
    pub watch_namespaces: WatchNamespaces,

    /// Where a group's pods go (`gpus.maxNodes` above 1): `node`, one pod per node, as the
    /// plan assumes; `none`, ranks may share a node with GPUs free for several (to try a group
    /// on a single node).
    #[arg(long, value_enum, default_value_t = GroupSpread::Node)]
    pub group_spread: GroupSpread,

    /// Use the node model cache (docs/model-cache-placement.md): one-pod replicas, batch
    /// attempts and batch groups mount their `model.huggingFace` model from a node's cache, or
    /// wait while a node downloads it.
    #[arg(long)]
    pub model_cache: bool,
    /// The cache's root folder on every GPU node (the cache agent's).
    #[arg(long, default_value = crate::settings::DEFAULT_CACHE_ROOT)]
    pub model_cache_root: String,
    /// Seconds a replica or an attempt waits for a node to download its model before its pods
    /// fetch it themselves.
    #[arg(long, default_value_t = 900)]
    pub model_cache_wait_seconds: u32,
    /// The most nodes per class asked to hold a job's model ahead of its pods (the nodes its
    /// pods run on always are).
    #[arg(long, default_value_t = 4)]
    pub model_cache_prefetch_nodes: u16,

    /// Seconds between two reads of an autoscaled job's replicas' metrics
    /// (`serve.autoscaling`, docs/autoscaling.md).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u32).range(1..=600))]
    pub autoscale_period_seconds: u32,
}

impl Args {
    /// The `--model-cache*` settings.
    pub fn model_cache_settings(&self) -> crate::settings::ModelCacheSettings {
        crate::settings::ModelCacheSettings {
            enabled: self.model_cache,
            root: self.model_cache_root.trim_end_matches('/').to_string(),
            wait: std::time::Duration::from_secs(self.model_cache_wait_seconds.into()),
            prefetch_nodes: self.model_cache_prefetch_nodes.into(),
        }
    }
}

/// A `--hub-token-repos` entry: `owner/name` or `owner/*`.
fn repo_pattern(text: &str) -> Result<String, String> {
    crate::hub_models::token_scope::TokenScope::new([], [text.to_string()])
        .map(|_| text.to_string())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn flags_and_defaults_match_the_chart() {
        Args::command().debug_assert();
        let args = Args::try_parse_from(["vramfit-operator"]).unwrap();
        assert_eq!(args.metrics_addr.to_string(), "0.0.0.0:8080");
        assert!(!args.leader_election);
        assert_eq!(args.lease_name, "vramfit-operator");
        assert_eq!(args.log_format, LogFormat::Text);
        assert_eq!(args.concurrency, 64);
        assert_eq!(args.worker_threads, 1);
        assert_eq!(args.watch_namespaces.listed(), None);
        assert_eq!(args.group_spread, GroupSpread::Node);
        let args = Args::try_parse_from([
            "vramfit-operator",
            "--metrics-addr=0.0.0.0:9090",
            "--leader-election",
            "--lease-name=x",
            "--lease-namespace=vramfit-system",
            "--log-format=json",
            "--concurrency=4",
            "--worker-threads=2",
            "--watch-namespaces=team-a,team-b",
            "--group-spread=none",
        ])
        .unwrap();
        assert!(args.leader_election);
        assert_eq!(args.lease_namespace, "vramfit-system");
        assert_eq!(args.log_format, LogFormat::Json);
        assert_eq!(args.concurrency, 4);
        assert_eq!(args.worker_threads, 2);
        assert_eq!(
            args.watch_namespaces.listed(),
            Some(&["team-a".to_string(), "team-b".to_string()][..])
        );
        assert_eq!(args.group_spread, GroupSpread::None);
        assert!(Args::try_parse_from(["vramfit-operator", "--concurrency=0"]).is_err());
        assert!(Args::try_parse_from(["vramfit-operator", "--group-spread=zone"]).is_err());
    }

    #[test]
    fn the_model_cache_is_off_unless_asked_and_its_flags_match_the_chart() {
        let args = Args::try_parse_from(["vramfit-operator"]).unwrap();
        let off = args.model_cache_settings();
        assert!(!off.enabled);
        assert_eq!(off.root, "/var/lib/vramfit/cache");
        assert_eq!(off.wait.as_secs(), 900);
        assert_eq!(off.prefetch_nodes, 4);
        let args = Args::try_parse_from([
            "vramfit-operator",
            "--model-cache",
            "--model-cache-root=/data/cache/",
            "--model-cache-wait-seconds=60",
            "--model-cache-prefetch-nodes=2",
        ])
        .unwrap();
        let on = args.model_cache_settings();
        assert!(on.enabled);
        assert_eq!(
            on.root, "/data/cache",
            "no trailing slash in the volumes' paths"
        );
        assert_eq!(on.wait.as_secs(), 60);
        assert_eq!(on.prefetch_nodes, 2);
    }

    #[test]
    fn the_hub_token_is_mapped_to_namespaces_and_repositories() {
        let none = Args::try_parse_from(["vramfit-operator"]).unwrap();
        assert_eq!(none.hub_token_namespaces.listed(), None, "no namespace");
        assert!(none.hub_token_repos.is_empty());
        assert_eq!(none.hub_read_deadline_seconds, 120);
        let args = Args::try_parse_from([
            "vramfit-operator",
            "--hub-token-namespaces=team-a,team-b",
            "--hub-token-repos=my-org/*,other/model",
            "--hub-read-deadline-seconds=30",
        ])
        .unwrap();
        assert_eq!(
            args.hub_token_namespaces.listed(),
            Some(&["team-a".to_string(), "team-b".to_string()][..])
        );
        assert_eq!(args.hub_token_repos, ["my-org/*", "other/model"]);
        assert_eq!(args.hub_read_deadline_seconds, 30);
        let error = Args::try_parse_from(["vramfit-operator", "--hub-token-repos=a/b/c"])
            .unwrap_err()
            .to_string();
        assert!(error.contains("neither owner/name nor owner/*"), "{error}");
    }

    #[test]
    fn an_invalid_watched_namespace_stops_the_start_with_a_clear_error() {
        let error =
            Args::try_parse_from(["vramfit-operator", "--watch-namespaces", "team-a,Team_B"])
                .unwrap_err()
                .to_string();
        assert!(error.contains("--watch-namespaces"), "{error}");
        assert!(error.contains("\"Team_B\""), "{error}");
        assert!(error.contains("DNS-1123"), "{error}");
        let all = Args::try_parse_from(["vramfit-operator", "--watch-namespaces="]).unwrap();
        assert_eq!(
            all.watch_namespaces.listed(),
            None,
            "empty: every namespace"
        );
    }
}
