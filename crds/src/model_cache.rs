//! `ModelCache`: one per GPU node, named after the node. The operator writes which models the
//! node should hold (`spec`); the node's cache agent downloads them into the node-local cache
//! and says what it holds (`status`). docs/model-cache.md.
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The most models a node is asked to hold, and the most its status lists (most recently used
/// first): bounds the object's size whatever the number of jobs.
pub const MAX_MODELS: usize = 64;
/// The most namespaces listed per model.
pub const MAX_NAMESPACES: usize = 32;
/// Where pods mount a cached model (read-only).
pub const MOUNT_PATH: &str = "/var/lib/vramfit/model";
/// The annotation of a pod that mounts a cached model: `owner/name@revision`. The operator
/// reads it back to mark the model in use on the pod's node.
pub const POD_MODEL_ANNOTATION: &str = "vramfit.io/cached-model";
/// The label of every PersistentVolume and PersistentVolumeClaim the operator makes for a
/// cached model (value `true`).
pub const VOLUME_LABEL: &str = "vramfit.io/model-cache";

/// The models one node should hold in its cache, and what it holds.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "vramfit.io",
    version = "v1alpha1",
    kind = "ModelCache",
    shortname = "mcache",
    category = "vramfit",
    status = "ModelCacheStatus",
    doc = "The models a GPU node's cache should hold (written by the operator) and holds (written by the node's cache agent). Named after the node.",
    printcolumn(name = "Used", type_ = "integer", json_path = ".status.usedBytes"),
    printcolumn(name = "Budget", type_ = "integer", json_path = ".status.budgetBytes"),
    printcolumn(name = "Fetching", type_ = "string", json_path = ".status.fetching"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ModelCacheSpec {
    /// The models the node should hold, most needed first. Always written, empty too: a
    /// server-side apply of `spec: {}` is read as a null spec and refused.
    #[serde(default)]
    #[schemars(length(max = 64))]
    pub models: Vec<WantedModel>,
}

/// One model a node should hold. Its repo and revision follow the rules of a job's
/// `model.huggingFace`.
// `WantedModel::problem` is the same check in Rust: the operator applies it before an entry
// enters a spec (crds/tests/model_cache_keys.rs keeps the two equal).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[x_kube(validation = Rule::new("self.repo.matches('^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$')").message("repo must be owner/name of letters, digits, '-', '_' and '.'"))]
#[x_kube(validation = Rule::new("!self.revision.matches('(^|/)[.]')").message("revision must not be '.' or '..' or have a part starting with '.'"))]
#[serde(rename_all = "camelCase")]
pub struct WantedModel {
    /// `owner/name`.
    #[schemars(length(min = 1, max = 96))]
    pub repo: String,
    /// The branch, tag or commit, as the jobs name it.
    #[schemars(length(min = 1, max = 255))]
    pub revision: String,
    /// The namespaces of the jobs that want it: the node uses the Hub token only when it
    /// serves one of them (the token's namespaces, as the operator's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32), inner(length(min = 1, max = 63)))]
    pub namespaces: Vec<String>,
    /// A pod on this node mounts the model now: it is never evicted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_use: bool,
}

impl WantedModel {
    /// `owner/name@revision`.
    pub fn key(&self) -> String {
        model_key(&self.repo, &self.revision)
    }

    /// Why the ModelCache schema would refuse this entry, if it would (its bounds and rules,
    /// checked here so that one bad entry is left out rather than the whole spec refused).
    pub fn problem(&self) -> Option<&'static str> {
        if let Some(problem) = key_problem(&self.repo, &self.revision) {
            return Some(problem);
        }
        if self.namespaces.len() > MAX_NAMESPACES {
            return Some("more than 32 namespaces");
        }
        if self
            .namespaces
            .iter()
            .any(|n| n.is_empty() || n.chars().count() > 63)
        {
            return Some("a namespace is empty or longer than 63 characters");
        }
        None
    }
}

/// The most characters of a repository (`owner/name`) in a ModelCache's spec.
pub const MAX_REPO_CHARS: usize = 96;
/// The most characters of a revision in a ModelCache's spec.
pub const MAX_REVISION_CHARS: usize = 255;

/// Why `repo` and `revision` cannot name a model in a ModelCache's spec, if they cannot: the
/// schema's bounds and rules on `spec.models[].repo` and `.revision` (a job's
/// `model.huggingFace` follows the same), in Rust.
pub fn key_problem(repo: &str, revision: &str) -> Option<&'static str> {
    let repo_chars = repo.chars().count();
    if repo_chars == 0 || repo_chars > MAX_REPO_CHARS {
        return Some("repo is empty or longer than 96 characters");
    }
    let mut parts = repo.split('/');
    let well_formed = parts.by_ref().take(2).all(is_repo_part) && parts.next().is_none();
    if !well_formed {
        return Some("repo must be owner/name of letters, digits, '-', '_' and '.'");
    }
    let revision_chars = revision.chars().count();
    if revision_chars == 0 || revision_chars > MAX_REVISION_CHARS {
        return Some("revision is empty or longer than 255 characters");
    }
    if revision.split('/').any(|part| part.starts_with('.')) {
        return Some("revision must not be '.' or '..' or have a part starting with '.'");
    }
    None
}

/// One part of `owner/name`: a letter or digit, then letters, digits, `.`, `_` and `-`.
fn is_repo_part(part: &str) -> bool {
    let mut chars = part.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// `owner/name@revision`: how a model is named in keys, annotations and messages.
pub fn model_key(repo: &str, revision: &str) -> String {
    format!("{repo}@{revision}")
}

/// What a node's cache holds.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ModelCacheStatus {
    /// The bytes the cache may hold (the agent's `--budget-bytes`).
    #[serde(default)]
    pub budget_bytes: u64,
    /// The bytes of the models in the cache.
    #[serde(default)]
    pub used_bytes: u64,
    /// The model being downloaded now (`owner/name@revision`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetching: Option<String>,
    /// Each wanted or cached model (at most 64, the wanted ones and then the most recently
    /// used).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub models: Vec<CachedModel>,
    /// The `metadata.generation` of the spec this status answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// When the agent last wrote this status (it does at least every few minutes: an older
    /// one means the agent is gone and the cache is not trusted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_time: Option<Time>,
}

/// One model in a node's cache.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CachedModel {
    /// `owner/name`.
    pub repo: String,
    /// The revision.
    pub revision: String,
    /// Where the model is.
    pub phase: CachedModelPhase,
    /// Bytes in place.
    #[serde(default)]
    pub bytes: u64,
    /// Bytes of every file of the model (0 until listed).
    #[serde(default)]
    pub total_bytes: u64,
    /// Read without a token: every namespace may mount it.
    #[serde(default)]
    pub public: bool,
    /// A private or gated model: the namespaces that may mount it (the token's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Last fetched or mounted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used: Option<Time>,
    /// Seconds the last download took (the files that were missing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub download_seconds: Option<u32>,
    /// Why it is not Ready, in one line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl CachedModel {
    /// `owner/name@revision`.
    pub fn key(&self) -> String {
        model_key(&self.repo, &self.revision)
    }

    /// Whether a pod of `namespace` may mount it now.
    pub fn mountable_by(&self, namespace: &str) -> bool {
        self.phase == CachedModelPhase::Ready
            && (self.public || self.namespaces.iter().any(|n| n == namespace))
    }
}

/// Where a model is in a node's cache.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CachedModelPhase {
    /// Wanted, not started.
    #[default]
    Pending,
    /// Being downloaded.
    Fetching,
    /// Every file in place and verified: it may be mounted.
    Ready,
    /// The last fetch failed (`message` says why); it is tried again later.
    Failed,
}

/// Where a replica's weights came from, as its status says.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightsSource {
    /// The node held the model when the pod was created.
    CacheHit,
    /// The replica waited while the node downloaded the model, then mounted it.
    FetchedByNode,
    /// The pod fetched the model itself (no node of its class held it, the cache is off, or
    /// the wait ran out).
    FetchedByPod,
}

/// A replica's weights: where they came from and how long the load took.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaWeights {
    /// Where the weights came from.
    pub source: WeightsSource,
    /// The cached model mounted (`owner/name@revision`), for the cache's sources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Seconds from the container's start to Ready (loading the weights and starting to
    /// serve), once Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_seconds: Option<u32>,
    /// Why the pod fetches the model itself though the job uses the node cache (no node of
    /// its class holds it, it is held for other namespaces only, the wait ran out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
