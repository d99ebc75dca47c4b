//! The operator's settings, from its flags ([`crate::cli`]): requeue timings, retry backoff,
//! the Hub, where a group's pods may go (`--group-spread`), the node model cache
//! (`--model-cache*`).
use std::time::Duration;

use crate::hub_models::resolver::HubSettings;

/// How a group's pods spread over nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum GroupSpread {
    /// One pod of a group per node (required pod anti-affinity on `kubernetes.io/hostname`),
    /// as the plan assumes: each rank has a node's planned GPUs and its own PCIe and network.
    #[default]
    Node,
    /// Ranks may share a node that has GPUs free for several of them: no anti-affinity, and
    /// room is counted in whole pods per node. For trying a group on a single node (a
    /// development cluster); ranks on one node still talk over the network, not NVLink.
    None,
}

impl GroupSpread {
    /// Whether a group's pods must each have a node of their own.
    pub fn one_pod_per_node(self) -> bool {
        self == GroupSpread::Node
    }
}

/// Timings of the decisions.
#[derive(Clone, Debug)]
pub struct Requeues {
    /// How soon an Unschedulable job is looked at again without any change.
    pub unschedulable: Duration,
    /// How soon a live job is looked at again without any change (a safety net for missed
    /// watch events).
    pub resync: Duration,
}

impl Default for Requeues {
    fn default() -> Self {
        Self {
            unschedulable: Duration::from_secs(300),
            resync: Duration::from_secs(3600),
        }
    }
}

/// Tunables (defaults suit production; tests and benchmarks shorten or lengthen them).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Requeue intervals of the decisions.
    pub requeues: Requeues,
    /// How long an applied pod counts against its class before a store shows it.
    pub reservation_ttl: Duration,
    /// First retry delay after a failed reconcile; doubles per consecutive failure.
    pub error_backoff_base: Duration,
    /// Longest retry delay after failed reconciles.
    pub error_backoff_max: Duration,
    /// Where `model.huggingFace` repositories are read.
    pub hub: HubSettings,
    /// Whether a group's pods each need a node of their own.
    pub group_spread: GroupSpread,
    /// The node model cache (`--model-cache*`; off by default).
    pub model_cache: ModelCacheSettings,
    /// How often the autoscaler reads the replicas' metrics (`--autoscale-period-seconds`).
    pub autoscale_period: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            requeues: Requeues::default(),
            reservation_ttl: Duration::from_secs(120),
            error_backoff_base: Duration::from_secs(1),
            error_backoff_max: Duration::from_secs(300),
            hub: HubSettings::new(vramfit_hub::DEFAULT_ENDPOINT.to_string()),
            group_spread: GroupSpread::Node,
            model_cache: ModelCacheSettings::default(),
            autoscale_period: Duration::from_secs(15),
        }
    }
}

/// `--model-cache*` flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelCacheSettings {
    /// `--model-cache`: the cache is used at all.
    pub enabled: bool,
    /// `--model-cache-root`: the cache's root folder on every node (the agent's).
    pub root: String,
    /// `--model-cache-wait-seconds`: how long a replica waits for a node to download its model
    /// before its pod fetches the model itself.
    pub wait: Duration,
    /// `--model-cache-prefetch-nodes`: the most nodes per class asked to hold a job's model
    /// ahead of its pods (the nodes its pods run on always are).
    pub prefetch_nodes: usize,
}

/// The default cache root on the nodes.
pub const DEFAULT_CACHE_ROOT: &str = "/var/lib/vramfit/cache";

impl Default for ModelCacheSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            root: DEFAULT_CACHE_ROOT.to_string(),
            wait: Duration::from_secs(900),
            prefetch_nodes: 4,
        }
    }
}
