//! What placement reads of the node caches (pure once built): each node's `ModelCache` (the
//! models its agent says it holds, and those it is asked to hold) and its free GPUs per class
//! for the job being placed.
use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use vramfit_api::model_cache::{CachedModel, ModelCache};

use super::HEARTBEAT_TRUST;
use super::job_model::{JobModel, job_model};
use super::placement::CacheAsk;
use crate::capacity::room::free_per_node;
use crate::capacity::{Inventory, PodConstraints};
use crate::context::Context;
use crate::settings::ModelCacheSettings;
use vramfit_api::InferenceJob;

/// The caches and the free GPUs of every node, as one decision sees them.
#[derive(Clone, Debug, Default)]
pub struct CacheView {
    /// The `--model-cache*` settings.
    pub settings: ModelCacheSettings,
    /// The job's model, when it may use the cache.
    pub model: Option<JobModel>,
    /// The job's namespace.
    pub namespace: String,
    /// Per node: what its cache holds (agent's status, trusted only while its heartbeat is
    /// recent) and is asked to hold (the spec).
    pub nodes: BTreeMap<String, NodeCache>,
    /// Free GPUs of the class's resource on each node the job's pod may use, by `(class,
    /// node)`.
    pub free: BTreeMap<(String, String), u32>,
    /// A group's pods each need a node of their own (`--group-spread node`): a group of N
    /// mounts only from N distinct nodes holding the model.
    pub one_pod_per_node: bool,
}

/// One node's cache.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeCache {
    /// The models the agent says the node holds or fetches (empty when its status is stale).
    pub held: Vec<CachedModel>,
    /// The keys the operator asked the node to hold.
    pub wanted: Vec<String>,
    /// The node's agent is alive (its heartbeat is trusted): a model it is not asked for yet
    /// will be, once the replica waiting for it names its class (the next sync).
    pub live: bool,
    /// The cache budget its agent has left, `budgetBytes - usedBytes` (0 when its status is
    /// stale): prefetch goes where a model fits first.
    pub free_bytes: u64,
}

/// How far ahead of the operator's clock a heartbeat may be dated and still be trusted (the
/// node's clock may run a little ahead). One dated further ahead is not trusted at all: it
/// would otherwise stay "recent" until that date, long after its agent is gone.
pub const HEARTBEAT_SKEW: Duration = Duration::from_secs(60);

/// The agent's status of `cache`, while its heartbeat is younger than `trust` at `now` and
/// dated at most [`HEARTBEAT_SKEW`] ahead of it.
fn trusted_status<'c>(
    cache: &'c ModelCache,
    now: &Time,
    trust: Duration,
) -> Option<&'c vramfit_api::ModelCacheStatus> {
    let status = cache.status.as_ref()?;
    let beat = status.heartbeat_time.as_ref()?;
    let age = now.0.duration_since(beat.0).as_secs_f64();
    (-HEARTBEAT_SKEW.as_secs_f64() <= age && age <= trust.as_secs_f64()).then_some(status)
}

/// The budget `cache`'s agent has left, while its status is trusted.
fn free_bytes(cache: &ModelCache, now: &Time, trust: Duration) -> u64 {
    trusted_status(cache, now, trust).map_or(0, |s| s.budget_bytes.saturating_sub(s.used_bytes))
}

impl NodeCache {
    /// A node's cache from its object: the status only while its heartbeat is younger than
    /// `trust` at `now`.
    pub fn of(cache: &ModelCache, now: &Time, trust: Duration) -> Self {
        Self {
            held: trusted_status(cache, now, trust)
                .map(|s| s.models.clone())
                .unwrap_or_default(),
            wanted: cache.spec.models.iter().map(|m| m.key()).collect(),
            live: trusted_status(cache, now, trust).is_some(),
            free_bytes: free_bytes(cache, now, trust),
        }
    }

    /// [`NodeCache::of`] keeping only model `key`; `None` when the node neither holds nor is
    /// asked to hold it and its agent is not alive (a placement reads one model: copying every node's whole list for
    /// each reconcile would not scale with nodes).
    pub fn of_model(cache: &ModelCache, key: &str, now: &Time, trust: Duration) -> Option<Self> {
        let (repo, revision) = key.split_once('@')?;
        let held: Vec<CachedModel> = trusted_status(cache, now, trust)
            .into_iter()
            .flat_map(|s| &s.models)
            .filter(|m| m.repo == repo && m.revision == revision)
            .cloned()
            .collect();
        let wanted: Vec<String> = cache
            .spec
            .models
            .iter()
            .filter(|m| m.repo == repo && m.revision == revision)
            .map(|m| m.key())
            .collect();
        let live = trusted_status(cache, now, trust).is_some();
        (!held.is_empty() || !wanted.is_empty() || live).then(|| Self {
            held,
            wanted,
            live,
            free_bytes: free_bytes(cache, now, trust),
        })
    }

    /// The model `key` as the node holds it, if listed.
    pub fn model(&self, key: &str) -> Option<&CachedModel> {
        self.held.iter().find(|m| m.key() == key)
    }
}

/// What `job`'s placement sees of the caches; `None` when the cache is off or the job does
/// not use it (reads the stores, writes nothing).
pub fn observe(
    ctx: &Context,
    job: &InferenceJob,
    inventory: &Inventory,
    now: &Time,
) -> Option<CacheView> {
    let settings = &ctx.settings.model_cache;
    if !settings.enabled {
        return None;
    }
    let model = job_model(job)?;
    let nodes = ctx
        .stores
        .model_caches
        .state()
        .iter()
        .filter_map(|c| {
            let node = NodeCache::of_model(c, &model.key, now, HEARTBEAT_TRUST)?;
            Some((kube::ResourceExt::name_any(c.as_ref()), node))
        })
        .collect();
    let constraints = PodConstraints::of_job(job);
    let usage = ctx.stores.usage();
    let free = free_per_node(inventory, &usage, &constraints)
        .filter(|node| node.admitted)
        .map(|node| ((node.class.name.clone(), node.node.to_string()), node.free))
        .collect();
    Some(CacheView {
        settings: settings.clone(),
        namespace: kube::ResourceExt::namespace(job).unwrap_or_default(),
        model: Some(model),
        nodes,
        free,
        one_pod_per_node: ctx.settings.group_spread.one_pod_per_node(),
    })
}

/// A decision's [`CacheView`], built the first time a placement reads it: a reconcile that
/// makes no pod does not walk the nodes and caches.
pub struct LazyView<'a> {
    view: std::cell::OnceCell<Option<CacheView>>,
    make: Box<dyn Fn() -> Option<CacheView> + 'a>,
}

impl<'a> LazyView<'a> {
    /// The view `make` builds, once, when first read.
    pub fn new(make: impl Fn() -> Option<CacheView> + 'a) -> Self {
        Self {
            view: std::cell::OnceCell::new(),
            make: Box::new(make),
        }
    }

    /// No caches: the job does not use them.
    pub fn none() -> Self {
        Self::new(|| None)
    }

    /// The view, built on the first call.
    pub fn get(&self) -> Option<&CacheView> {
        self.view.get_or_init(|| (self.make)()).as_ref()
    }
}

impl CacheView {
    /// The job's model and namespace with the caches, for one placement.
    pub fn ask(&self) -> Option<CacheAsk<'_>> {
        Some(CacheAsk {
            view: self,
            namespace: &self.namespace,
            model: self.model.as_ref()?,
        })
    }

    /// The nodes of `class` the job's pod may use, by name.
    pub fn class_nodes<'s>(&'s self, class: &'s str) -> impl Iterator<Item = &'s str> + 's {
        self.free
            .keys()
            .filter(move |(c, _)| c == class)
            .map(|(_, node)| node.as_str())
    }

    /// Whether `node` of `class` has `gpus` free.
    pub fn has_room(&self, class: &str, node: &str, gpus: u32) -> bool {
        self.free
            .get(&(class.to_string(), node.to_string()))
            .is_some_and(|free| *free >= gpus)
    }

    /// `node`'s cache (empty when it has no ModelCache).
    pub fn node(&self, node: &str) -> Option<&NodeCache> {
        self.nodes.get(node)
    }

    /// The nodes of `class` with `gpus` free whose cache holds `key` Ready for `namespace`,
    /// by name.
    pub fn mountable_nodes(
        &self,
        class: &str,
        key: &str,
        namespace: &str,
        gpus: u32,
    ) -> Vec<String> {
        self.class_nodes(class)
            .filter(|node| self.has_room(class, node, gpus))
            .filter(|node| {
                self.node(node)
                    .and_then(|n| n.model(key))
                    .is_some_and(|m| m.mountable_by(namespace))
            })
            .map(str::to_string)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;
    use vramfit_api::model_cache::{CachedModelPhase, ModelCacheSpec, ModelCacheStatus};

    #[test]
    fn a_lazy_view_is_built_once_and_only_when_read() {
        let built = std::cell::Cell::new(0);
        let lazy = LazyView::new(|| {
            built.set(built.get() + 1);
            Some(CacheView::default())
        });
        assert_eq!(built.get(), 0, "not built until read");
        assert!(lazy.get().is_some());
        assert!(lazy.get().is_some());
        assert_eq!(built.get(), 1);
        assert!(LazyView::none().get().is_none());
    }

    /// Node `gpu-1`'s cache holding the public `o/m@main`, its agent's last heartbeat at
    /// `second`.
    fn holding_public_model_beating_at(second: i64) -> ModelCache {
        let mut cache = ModelCache::new("gpu-1", ModelCacheSpec::default());
        cache.status = Some(ModelCacheStatus {
            models: vec![CachedModel {
                repo: "o/m".into(),
                revision: "main".into(),
                phase: CachedModelPhase::Ready,
                public: true,
                ..Default::default()
            }],
            heartbeat_time: Some(Time(Timestamp::from_second(second).unwrap())),
            ..Default::default()
        });
        cache
    }

    #[test]
    fn a_stale_agent_status_is_not_trusted() {
        let now = Time(Timestamp::from_second(10_000).unwrap());
        let cache = holding_public_model_beating_at(9_900);
        let trust = Duration::from_secs(600);
        assert!(
            NodeCache::of(&cache, &now, trust)
                .model("o/m@main")
                .is_some()
        );
        let later = Time(Timestamp::from_second(20_000).unwrap());
        assert!(NodeCache::of(&cache, &later, trust).held.is_empty());
        let one = NodeCache::of_model(&cache, "o/m@main", &now, trust).unwrap();
        assert_eq!(one.held.len(), 1);
        let other = NodeCache::of_model(&cache, "o/other@main", &now, trust).unwrap();
        assert!(
            other.live && other.held.is_empty() && other.wanted.is_empty(),
            "a live agent's node is kept for a model it neither holds nor is asked for: {other:?}"
        );
        assert_eq!(
            NodeCache::of_model(&cache, "o/other@main", &later, trust),
            None,
            "a stale node that neither holds nor is asked to hold the model is left out"
        );
    }

    #[test]
    fn a_heartbeat_dated_in_the_future_is_trusted_only_within_the_clock_skew() {
        let now = Time(Timestamp::from_second(10_000).unwrap());
        let trust = Duration::from_secs(600);
        let beating_at = holding_public_model_beating_at;
        let slightly_ahead = NodeCache::of(&beating_at(10_030), &now, trust);
        assert!(slightly_ahead.live && slightly_ahead.model("o/m@main").is_some());
        // A year ahead: without the bound it would be trusted for a year.
        let far_ahead = beating_at(10_000 + 365 * 86_400);
        let seen = NodeCache::of(&far_ahead, &now, trust);
        assert!(!seen.live && seen.held.is_empty(), "{seen:?}");
        assert_eq!(
            NodeCache::of_model(&far_ahead, "o/m@main", &now, trust),
            None
        );
        assert!(!NodeCache::of(&beating_at(10_061), &now, trust).live);
        assert!(NodeCache::of(&beating_at(10_060), &now, trust).live);
    }
}
