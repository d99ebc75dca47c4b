//! Where a served replica's weights come from (pure). Among classes whose plans rank equal, a
//! class with a node that holds the model Ready (mountable by the job's namespace, with the
//! plan's GPUs free) is preferred — never a worse-ranked plan ([`prefer_cached_class`]). Then
//! on the chosen class ([`decide`]):
//!
//! * nodes holding it mountable, with room → the pod mounts it there (`CacheHit`, or
//!   `FetchedByNode` after a wait);
//! * none, but a node with room downloads it (or is asked to) and the replica has waited less
//!   than `--model-cache-wait-seconds` → the replica waits, no pod;
//! * otherwise → the pod fetches the model itself (`FetchedByPod`).
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use vramfit_api::model_cache::{CachedModelPhase, MAX_MODELS, WeightsSource};
use vramfit_api::{Fallback, Plan, Runtime};
use vramfit_planner::{JobInput, NodeClass, plan_for_class, ranking};

use super::job_model::JobModel;
use super::view::CacheView;
use crate::capacity::{Capacity, Inventory};

/// How long pods wait for a live node that the sync has not asked for their model, about
/// three sync passes: past that, no pass asked one (the model was cut from every node's list
/// of at most `MAX_MODELS`) and they fetch it themselves.
pub const UNASKED_AFTER: std::time::Duration =
    std::time::Duration::from_secs(3 * super::SYNC_PERIOD.as_secs());

/// The most node names in a pod's required affinity to the nodes holding its model.
pub const MAX_AFFINITY_NODES: usize = 32;

/// A job's model and the caches, for one placement.
#[derive(Clone, Copy, Debug)]
pub struct CacheAsk<'a> {
    /// The caches and free GPUs.
    pub view: &'a CacheView,
    /// The job's namespace.
    pub namespace: &'a str,
    /// The job's model.
    pub model: &'a JobModel,
}

impl CacheAsk<'_> {
    /// Whether at least `pods` nodes of `class` with `gpus` free hold the model mountable (a
    /// group of `pods` pods needs that many; a replica or a one-pod attempt one).
    pub fn cached_on(&self, class: &str, gpus: u32, pods: u32) -> bool {
        let holders = self
            .view
            .mountable_nodes(class, &self.model.key, self.namespace, gpus)
            .len();
        holders >= (pods.max(1) as usize)
    }
}

/// Where a replica's weights come from.
#[derive(Clone, Debug, PartialEq)]
pub enum CachePlacement {
    /// The pod mounts the model from one of `nodes`.
    Mount {
        /// `CacheHit` or `FetchedByNode`.
        source: WeightsSource,
        /// The nodes it may go to (at most [`MAX_AFFINITY_NODES`], by name).
        nodes: Vec<String>,
        /// The model's bytes (the volume's size).
        total_bytes: u64,
    },
    /// No pod yet: a node downloads the model.
    Wait {
        /// The replica line's message.
        message: String,
    },
    /// The pod fetches the model itself; `why`, when the cache could have served it.
    FetchedByPod {
        /// Said in the replica's message.
        why: Option<String>,
    },
}

/// The choice of `class` for `plan` kept, or a class whose plan ranks equal and that holds
/// the model (the first by name), when `class` does not.
pub fn prefer_cached_class(
    job: &JobInput,
    inventory: &Inventory,
    capacity: &Capacity,
    fallback: &Fallback,
    (plan, class): (Plan, NodeClass),
    ask: CacheAsk<'_>,
) -> (Plan, NodeClass) {
    if ask.cached_on(&class.name, plan.gpu_count, plan.nodes()) {
        return (plan, class);
    }
    let same_rank = |other: &Plan| {
        // `compare` breaks ties by class name last: compare as if both had one name.
        let mut renamed = other.clone();
        renamed.node_class.clone_from(&plan.node_class);
        ranking::compare(job.preference, &renamed, &plan) == std::cmp::Ordering::Equal
    };
    for candidate in inventory.classes.iter().filter(|c| c.name != class.name) {
        let Ok(other) = plan_for_class(job, candidate, fallback) else {
            continue;
        };
        if same_rank(&other)
            && capacity.has_room_on(&candidate.name, other.gpu_count, other.nodes())
            && ask.cached_on(&candidate.name, other.gpu_count, other.nodes())
        {
            return (other, candidate.clone());
        }
    }
    (plan, class)
}

/// When a replica started waiting for its model: where [`decide`] wrote it, at the end of
/// the line's message.
pub fn wait_started(message: Option<&str>) -> Option<Time> {
    let (_, since) = message?.rsplit_once(" since ")?;
    since.trim().parse::<Timestamp>().ok().map(Time)
}

/// What one placement decides on `class`.
pub struct Decide<'a> {
    /// The model and the caches.
    pub ask: CacheAsk<'a>,
    /// The chosen class.
    pub class: &'a str,
    /// The plan's GPUs per pod.
    pub gpus: u32,
    /// The pods placed together: 1 for a replica or a one-pod attempt, N for a group of N
    /// pods (all of them mount, or none does).
    pub pods: u32,
    /// Whether the pods each need a node of their own (a group under `--group-spread node`);
    /// otherwise a node counts once per `gpus` it has free.
    pub one_pod_per_node: bool,
    /// When the replica started waiting for its model, if it does.
    pub waited_since: Option<Time>,
    /// Now.
    pub now: &'a Time,
    /// Whether the replica may wait (not for a surge pod: its replica serves meanwhile).
    pub may_wait: bool,
}

impl Decide<'_> {
    /// How many of the pods `nodes` of the class take.
    fn pods_on(&self, nodes: &[String]) -> u32 {
        let view = self.ask.view;
        nodes
            .iter()
            .map(|node| {
                let free = view
                    .free
                    .get(&(self.class.to_string(), node.clone()))
                    .copied()
                    .unwrap_or_default();
                match (self.gpus, self.one_pod_per_node) {
                    (0, _) => 1,
                    (gpus, true) => u32::from(free >= gpus),
                    (gpus, false) => free / gpus,
                }
            })
            .fold(0u32, u32::saturating_add)
    }
}

/// `node a` or `nodes a, b`.
fn nodes_words(nodes: &[String]) -> String {
    match nodes {
        [one] => format!("node {one}"),
        many => format!("nodes {}", many.join(", ")),
    }
}

/// Where the weights of the next pod(s) on `class` come from: all `d.pods` mount the model
/// when the nodes holding it take them all, wait while enough more download it, or fetch.
pub fn decide(d: &Decide<'_>) -> CachePlacement {
    let model = d.ask.model;
    if model.runtime == Runtime::Llamacpp && model.file.is_none() {
        return CachePlacement::FetchedByPod {
            why: Some(
                "model.huggingFace.file is unset: llama.cpp loads one GGUF file, so the node cache is not used"
                    .to_string(),
            ),
        };
    }
    let pods = d.pods.max(1);
    let view = d.ask.view;
    let mut nodes = view.mountable_nodes(d.class, &model.key, d.ask.namespace, d.gpus);
    let held = d.pods_on(&nodes);
    if held >= pods {
        nodes.truncate(MAX_AFFINITY_NODES.max(pods as usize));
        let total_bytes = nodes
            .iter()
            .filter_map(|n| view.node(n).and_then(|c| c.model(&model.key)))
            .map(|m| m.total_bytes.max(m.bytes))
            .max()
            .unwrap_or_default();
        let source = if d.waited_since.is_some() {
            WeightsSource::FetchedByNode
        } else {
            WeightsSource::CacheHit
        };
        return CachePlacement::Mount {
            source,
            nodes,
            total_bytes,
        };
    }
    let with_room: Vec<&str> = view
        .class_nodes(d.class)
        .filter(|node| view.has_room(d.class, node, d.gpus))
        .collect();
    // A live node not asked yet is asked at the next sync, unless the pods have waited
    // [`UNASKED_AFTER`] and still no node with room is: every node's list was full.
    let unasked = d.waited_since.as_ref().is_some_and(|since| {
        d.now.0.duration_since(since.0).as_secs_f64() >= UNASKED_AFTER.as_secs_f64()
    });
    let fetching: Vec<(String, u64, u64)> = with_room
        .iter()
        .filter_map(|node| {
            let cache = view.node(node)?;
            match cache.model(&model.key) {
                Some(held)
                    if matches!(
                        held.phase,
                        CachedModelPhase::Fetching | CachedModelPhase::Pending
                    ) =>
                {
                    let may = held.public
                        || held.namespaces.is_empty()
                        || held.namespaces.iter().any(|n| n == d.ask.namespace);
                    may.then(|| (node.to_string(), held.bytes, held.total_bytes))
                }
                Some(_) => None,
                // Asked to fetch it, or alive and asked at the next sync (the waiting
                // replica's line names the class whose nodes the sync asks).
                None => ((cache.live && !unasked) || cache.wanted.contains(&model.key))
                    .then(|| (node.to_string(), 0, 0)),
            }
        })
        .collect();
    let fetching_nodes: Vec<String> = fetching.iter().map(|(n, _, _)| n.clone()).collect();
    let enough = held.saturating_add(d.pods_on(&fetching_nodes)) >= pods;
    if fetching.is_empty() || !enough || !d.may_wait {
        let short = (pods > 1 && (held > 0 || !fetching.is_empty())).then(|| {
            format!(
                "{held} of the group's {pods} pods fit on nodes of class {} holding {}, and downloads would not make up the rest",
                d.class, model.key
            )
        });
        // A node holding the model for other namespaces only is never named: the note goes
        // to this job's namespace, which must not learn what another one holds; it reads as
        // if no node held the model.
        let cut = (unasked && fetching.is_empty()).then(|| {
            format!(
                "no node of class {} with room was asked to download {} (each node's cache lists at most {MAX_MODELS} models, those most jobs want); the pod fetches it itself",
                d.class, model.key
            )
        });
        let why = short.filter(|_| !enough).or(cut);
        return CachePlacement::FetchedByPod { why };
    }
    // The nodes waited for: as many as the pods the holders do not take.
    let needed = pods - held;
    let mut waited_for = Vec::new();
    for (node, _, _) in &fetching {
        if d.pods_on(&waited_for) >= needed {
            break;
        }
        waited_for.push(node.clone());
    }
    let (bytes, total) = fetching
        .iter()
        .filter(|(n, _, _)| waited_for.contains(n))
        .fold((0u64, 0u64), |(b, t), (_, bytes, total)| {
            (b.saturating_add(*bytes), t.saturating_add(*total))
        });
    let node = nodes_words(&waited_for);
    let since = d.waited_since.clone().unwrap_or_else(|| d.now.clone());
    let waited = d.now.0.duration_since(since.0).as_secs_f64();
    let limit = view.settings.wait.as_secs_f64();
    if waited >= limit {
        return CachePlacement::FetchedByPod {
            why: Some(format!(
                "waited {} s for {node} to download {}; the pod fetches it itself",
                limit as u64, model.key
            )),
        };
    }
    CachePlacement::Wait {
        message: format!(
            "waiting for {node} to download {} ({bytes} of {total} bytes) since {}",
            model.key, since.0
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::{PodConstraints, build_inventory};
    use crate::fixtures;
    use crate::model_cache::attempt_placement::tests::held;
    use crate::model_cache::view::NodeCache;
    use crate::stores::gpu_usage::GpuUsage;
    use std::sync::Arc;
    use std::time::Duration;
    use vramfit_api::model_cache::CachedModel;
    use vramfit_planner::resolve_job;

    fn model(runtime: Runtime, file: Option<&str>) -> JobModel {
        JobModel {
            repo: "o/m".into(),
            revision: "main".into(),
            key: "o/m@main".into(),
            file: file.map(str::to_string),
            runtime,
        }
    }

    /// Class `c` of nodes `n-1` and `n-2`, each with 1 GPU free; `n-1`'s cache holds `model`.
    fn view(model: Option<CachedModel>, wanted: bool) -> CacheView {
        let mut view = CacheView::default();
        for node in ["n-1", "n-2"] {
            view.free.insert(("c".into(), node.into()), 1);
        }
        view.nodes.insert(
            "n-1".into(),
            NodeCache {
                held: model.into_iter().collect(),
                wanted: if wanted {
                    vec!["o/m@main".into()]
                } else {
                    Vec::new()
                },
                live: false,
                free_bytes: 0,
            },
        );
        view
    }

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    fn run(
        view: &CacheView,
        model: &JobModel,
        namespace: &str,
        since: Option<Time>,
        now: i64,
    ) -> CachePlacement {
        decide(&Decide {
            ask: CacheAsk {
                view,
                namespace,
                model,
            },
            class: "c",
            gpus: 1,
            pods: 1,
            one_pod_per_node: true,
            waited_since: since,
            now: &at(now),
            may_wait: true,
        })
    }

    #[test]
    fn a_ready_model_is_mounted_from_the_nodes_that_hold_it() {
        let v = view(Some(held(CachedModelPhase::Ready, &[])), false);
        let m = model(Runtime::Vllm, None);
        assert_eq!(
            run(&v, &m, "a", None, 100),
            CachePlacement::Mount {
                source: WeightsSource::CacheHit,
                nodes: vec!["n-1".into()],
                total_bytes: 40
            }
        );
        let after_wait = run(&v, &m, "a", Some(at(50)), 100);
        assert!(matches!(
            after_wait,
            CachePlacement::Mount {
                source: WeightsSource::FetchedByNode,
                ..
            }
        ));
    }

    #[test]
    fn a_private_model_is_not_mounted_by_another_namespace() {
        let v = view(Some(held(CachedModelPhase::Ready, &["team-a"])), false);
        let m = model(Runtime::Vllm, None);
        assert!(matches!(
            run(&v, &m, "team-a", None, 0),
            CachePlacement::Mount { .. }
        ));
        let seen_by_b = run(&v, &m, "team-b", None, 0);
        assert_eq!(
            seen_by_b,
            CachePlacement::FetchedByPod { why: None },
            "team-b fetches it, and its note says nothing of what another namespace holds"
        );
        assert_eq!(
            seen_by_b,
            run(&view(None, false), &m, "team-b", None, 0),
            "as if no node held it"
        );
    }

    #[test]
    fn a_replica_waits_while_a_node_fetches_until_the_deadline() {
        let mut v = view(Some(held(CachedModelPhase::Fetching, &[])), false);
        v.settings.wait = Duration::from_secs(900);
        let m = model(Runtime::Vllm, None);
        let CachePlacement::Wait { message } = run(&v, &m, "a", None, 1000) else {
            panic!("waits");
        };
        assert!(
            message.starts_with("waiting for node n-1 to download o/m@main (10 of 40 bytes)"),
            "{message}"
        );
        assert_eq!(
            wait_started(Some(&message)),
            Some(at(1000)),
            "the start is kept"
        );
        assert!(matches!(
            run(&v, &m, "a", Some(at(1000)), 1899),
            CachePlacement::Wait { .. }
        ));
        let CachePlacement::FetchedByPod { why: Some(why) } =
            run(&v, &m, "a", Some(at(1000)), 1900)
        else {
            panic!("the wait ran out");
        };
        assert!(why.contains("waited 900 s"), "{why}");
        // Asked in the spec, not yet in the status: waits too.
        let asked = view(None, true);
        assert!(matches!(
            run(&asked, &m, "a", None, 0),
            CachePlacement::Wait { .. }
        ));
        // Not asked yet, but the node's agent is alive: the sync asks it once the waiting
        // replica names the class, so the replica waits (a new job's first replica).
        let mut alive = view(None, false);
        if let Some(node) = alive.nodes.get_mut("n-1") {
            node.live = true;
        }
        assert!(matches!(
            run(&alive, &m, "a", None, 0),
            CachePlacement::Wait { .. }
        ));
        assert!(matches!(
            run(&alive, &m, "a", Some(at(0)), 29),
            CachePlacement::Wait { .. }
        ));
        // Three syncs later it is still not asked: its list was full (64 models most jobs
        // want); the pod fetches it, and says why, long before the deadline.
        let CachePlacement::FetchedByPod { why: Some(why) } = run(&alive, &m, "a", Some(at(0)), 30)
        else {
            panic!("a model asked on no node is not waited for");
        };
        assert!(
            why.starts_with("no node of class c with room was asked to download o/m@main"),
            "{why}"
        );
        // Asked by then: the replica waits on.
        alive.nodes.get_mut("n-1").unwrap().wanted = vec!["o/m@main".into()];
        assert!(matches!(
            run(&alive, &m, "a", Some(at(0)), 30),
            CachePlacement::Wait { .. }
        ));
        // Nobody has it or fetches it, and no agent is alive: the pod fetches it.
        let none = view(None, false);
        assert_eq!(
            run(&none, &m, "a", None, 0),
            CachePlacement::FetchedByPod { why: None }
        );
        // A fetching node with no GPU free is not waited for.
        let mut full = view(Some(held(CachedModelPhase::Fetching, &[])), false);
        full.free.insert(("c".into(), "n-1".into()), 0);
        assert!(matches!(
            run(&full, &m, "a", None, 0),
            CachePlacement::FetchedByPod { .. }
        ));
    }

    #[test]
    fn the_affinity_names_at_most_32_nodes_by_name() {
        let mut v = CacheView::default();
        for i in 0..40 {
            let node = format!("n-{i:02}");
            v.free.insert(("c".into(), node.clone()), 1);
            v.nodes.insert(
                node,
                NodeCache {
                    held: vec![held(CachedModelPhase::Ready, &[])],
                    wanted: Vec::new(),
                    live: true,
                    free_bytes: 0,
                },
            );
        }
        let CachePlacement::Mount { nodes, .. } =
            run(&v, &model(Runtime::Vllm, None), "a", None, 0)
        else {
            panic!("mounted");
        };
        assert_eq!(nodes.len(), MAX_AFFINITY_NODES);
        assert_eq!(nodes.first().map(String::as_str), Some("n-00"));
        assert_eq!(nodes.last().map(String::as_str), Some("n-31"));
    }

    #[test]
    fn llamacpp_without_a_file_fetches_in_the_pod() {
        let v = view(Some(held(CachedModelPhase::Ready, &[])), false);
        let CachePlacement::FetchedByPod { why: Some(why) } =
            run(&v, &model(Runtime::Llamacpp, None), "a", None, 0)
        else {
            panic!("no file");
        };
        assert!(why.contains("file"), "{why}");
        assert!(matches!(
            run(&v, &model(Runtime::Llamacpp, Some("m.gguf")), "a", None, 0),
            CachePlacement::Mount { .. }
        ));
    }

    /// Two classes whose plans rank equal (two identical A10G nodes named apart by a
    /// GpuNodeClass-free label: `a10g-x1` and an L4 would not be equal), each 1 GPU free.
    fn equal_classes() -> (Inventory, Capacity, JobInput) {
        let mut spec = fixtures::vllm_mistral_spec();
        spec.context_length = Some(8192);
        spec.batch_size = 4;
        let nodes = vec![
            Arc::new(fixtures::gpu_node("a-1", "a10g", 1, 1)),
            Arc::new(fixtures::gpu_node("l-1", "l40s", 1, 1)),
        ];
        let inventory = build_inventory(&nodes, &[]);
        let job = fixtures::job("chat", spec);
        let capacity = Capacity::compute(
            &inventory,
            &GpuUsage::default(),
            &[],
            &PodConstraints::of_job(&job),
            &|_| true,
        );
        (inventory, capacity, resolve_job(&job.spec).unwrap())
    }

    #[test]
    fn a_worse_plan_on_a_cached_class_is_not_taken_but_an_equal_one_is() {
        let (inventory, capacity, job) = equal_classes();
        let fallback = Fallback::default();
        let best = inventory.class("l40s-x1").unwrap().clone();
        let best_plan = plan_for_class(&job, &best, &fallback).unwrap();
        let mut v = CacheView::default();
        v.free.insert(("a10g-x1".into(), "a-1".into()), 1);
        v.free.insert(("l40s-x1".into(), "l-1".into()), 1);
        v.nodes.insert(
            "a-1".into(),
            NodeCache {
                held: vec![held(CachedModelPhase::Ready, &[])],
                wanted: Vec::new(),
                live: true,
                free_bytes: 0,
            },
        );
        let m = model(Runtime::Vllm, None);
        let ask = CacheAsk {
            view: &v,
            namespace: "default",
            model: &m,
        };
        let (plan, class) = prefer_cached_class(
            &job,
            &inventory,
            &capacity,
            &fallback,
            (best_plan.clone(), best.clone()),
            ask,
        );
        assert_eq!(
            class.name, "l40s-x1",
            "the A10G's 8-bit plan ranks lower: not taken"
        );
        assert_eq!(plan, best_plan);
        // The same plan under another name ranks equal: the cached class wins.
        let mut twin = inventory.clone();
        if let Some(slot) = twin.classes.iter_mut().find(|c| c.name == "a10g-x1") {
            *slot = NodeClass {
                name: "a10g-x1".into(),
                ..best.clone()
            };
        }
        let equal_capacity = Capacity::compute(
            &twin,
            &GpuUsage::default(),
            &[],
            &PodConstraints::default(),
            &|_| true,
        );
        let (_, chosen) = prefer_cached_class(
            &job,
            &twin,
            &equal_capacity,
            &fallback,
            (best_plan, best.clone()),
            ask,
        );
        assert_eq!(
            chosen.name, "a10g-x1",
            "equal rank: the class holding the model"
        );
        // A class the job (or its attempt) may not use is never preferred: a batch attempt
        // passes the classes it excludes as denied.
        let mut denied = job.clone();
        denied.classes.denied.push("a10g-x1".into());
        let (_, kept) = prefer_cached_class(
            &denied,
            &twin,
            &equal_capacity,
            &fallback,
            (
                plan_for_class(&denied, &best, &fallback).unwrap(),
                best.clone(),
            ),
            ask,
        );
        assert_eq!(kept.name, "l40s-x1", "the cached class is denied");
    }

    /// A plan that spans two nodes (a served replica's group, or a batch group's) prefers an
    /// equal class only where two of its nodes with room hold the model: one holder is not
    /// enough.
    #[test]
    fn a_two_node_plan_prefers_an_equal_class_only_where_two_nodes_hold_the_model() {
        // Qwen3-32B in 16 bits needs two A10G×2 nodes.
        let mut spec = fixtures::spec_from_json(
            r#"{"model": {"preset": "qwen3-32b"}, "runtime": "vllm",
                "image": "vllm/vllm-openai:v0.10.2", "allowedQuantizations": ["none"],
                "contextLength": 2048, "gpus": {"max": 2, "maxNodes": 2}}"#,
        );
        spec.serve = Some(Default::default());
        let job = resolve_job(&spec).unwrap();
        let nodes: Vec<_> = [
            ("a-1", "a10g"),
            ("a-2", "a10g"),
            ("b-1", "l40s"),
            ("b-2", "l40s"),
        ]
        .iter()
        .map(|(n, kind)| Arc::new(fixtures::gpu_node(n, kind, 2, 2)))
        .collect();
        let mut inventory = build_inventory(&nodes, &[]);
        let chosen = inventory.class("a10g-x2").unwrap().clone();
        // b-1 and b-2's class made an A10G×2 class under another name: its plans rank equal.
        let twin = "l40s-x2";
        if let Some(slot) = inventory.classes.iter_mut().find(|c| c.name == twin) {
            *slot = NodeClass {
                name: twin.into(),
                ..chosen.clone()
            };
        }
        let capacity = Capacity::compute(
            &inventory,
            &GpuUsage::default(),
            &[],
            &PodConstraints::default(),
            &|_| true,
        );
        let fallback = Fallback::default();
        let plan = plan_for_class(&job, &chosen, &fallback).unwrap();
        assert_eq!(plan.nodes(), 2, "{plan:?}");
        let m = model(Runtime::Vllm, None);
        let view = |holders: &[&str]| {
            let mut v = CacheView::default();
            for (class, node) in [
                (chosen.name.as_str(), "a-1"),
                (chosen.name.as_str(), "a-2"),
                (twin, "b-1"),
                (twin, "b-2"),
            ] {
                v.free.insert((class.into(), node.into()), 2);
            }
            for node in holders {
                v.nodes.insert(
                    (*node).into(),
                    NodeCache {
                        held: vec![held(CachedModelPhase::Ready, &[])],
                        wanted: Vec::new(),
                        live: true,
                        free_bytes: 0,
                    },
                );
            }
            v
        };
        let pick = |v: &CacheView| {
            let ask = CacheAsk {
                view: v,
                namespace: "default",
                model: &m,
            };
            let (plan, class) = prefer_cached_class(
                &job,
                &inventory,
                &capacity,
                &fallback,
                (plan.clone(), chosen.clone()),
                ask,
            );
            (plan.nodes(), class.name)
        };
        assert_eq!(
            pick(&view(&["b-1"])),
            (2, chosen.name.clone()),
            "one holder does not take a group of two"
        );
        assert_eq!(
            pick(&view(&["b-1", "b-2"])),
            (2, twin.to_string()),
            "two holders with room: the class holding the model"
        );
    }
}
