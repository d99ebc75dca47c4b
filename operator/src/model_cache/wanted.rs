//! The models each GPU node's cache should hold (pure). Every job with the cache on wants its
//! model on the nodes its pods run on, and ahead of its pods on a few nodes of each class its
//! replicas or attempt are planned on (at most `prefetch_nodes`, at least a group's pods). A
//! model a live pod mounts is wanted on that pod's node (in use: never evicted), whichever job
//! it belongs to. Each node keeps at most `MAX_MODELS`: the ones in use first, then those most
//! jobs want, then by key.
//!
//! Prefetch spreads: models are placed most wanted first, and for each the nodes of the class
//! are ranked once — holding it Ready first; then a live agent with room for a pod; then a
//! live agent; then already asked, downloading it or wanting it in this pass (a choice is kept
//! from pass to pass, no churn); then the model fits the free cache budget; then the fewest
//! models this pass has already sent there (different models land on different nodes); then
//! more free GPUs, more free budget, and name. A node whose list is full is passed over, so a
//! model is cut from every node only when every node of the class lists `MAX_MODELS` others
//! (placement then lets its pods fetch it).
//!
//! Cost: strings are interned once, every ranking key is built from integers, and each
//! distinct (model, class, GPUs per pod, nodes asked) is ranked once whatever the number of
//! its jobs: O(jobs + demands × class nodes + entries × log entries), no allocation per
//! comparison.
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use vramfit_api::model_cache::{CachedModelPhase, MAX_MODELS, MAX_NAMESPACES, WantedModel};

use super::job_model::JobModel;
use super::view::NodeCache;

/// A job that wants its model cached.
#[derive(Clone, Debug)]
pub struct JobWant {
    /// The job's namespace.
    pub namespace: String,
    /// Its model.
    pub model: JobModel,
    /// The nodes its pods run on.
    pub pod_nodes: Vec<String>,
    /// The classes its replicas are planned on (status `replicaStatuses[].nodeClass`,
    /// `surge.nodeClass`), or its attempt's (`status.nodeClass`).
    pub classes: Vec<String>,
    /// The fewest nodes of each class asked to hold the model, whatever `prefetch_nodes`
    /// says: a group's pods (a group of N mounts only from N holders); 0 otherwise.
    pub nodes_per_class: usize,
    /// The GPUs one of its pods takes (its plan's; 1 when none is known yet).
    pub gpus_per_pod: u32,
}

/// A live pod that mounts a cached model.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct MountingPod {
    /// Its node.
    pub node: String,
    /// Its namespace.
    pub namespace: String,
    /// Its `POD_MODEL_ANNOTATION` (`owner/name@revision`).
    pub key: String,
}

/// What the wanted specs are computed from.
pub struct WantedInput<'a> {
    /// The jobs that want their model cached.
    pub jobs: &'a [JobWant],
    /// Live pods that mount a cached model.
    pub mounting: &'a [MountingPod],
    /// The nodes of each class.
    pub class_nodes: &'a BTreeMap<String, Vec<String>>,
    /// Each node's cache (trusted status), by node.
    pub caches: &'a BTreeMap<String, NodeCache>,
    /// The GPUs of each `(class, node)` that bound pods leave free.
    pub free: &'a BTreeMap<(String, String), u32>,
    /// The most nodes per class asked to hold a job's model ahead of its pods.
    pub prefetch_nodes: usize,
}

/// The desired `spec.models` of every node that should hold any model (nodes absent want
/// nothing).
pub fn wanted_models(input: &WantedInput<'_>) -> BTreeMap<String, Vec<WantedModel>> {
    let mut pass = Pass::new(input);
    pass.pod_nodes_and_mounts();
    pass.prefetch();
    pass.specs()
}

/// A model named in this pass.
struct Model<'a> {
    key: &'a str,
    repo: &'a str,
    revision: &'a str,
    /// Jobs that want it, all classes together: the more, the sooner it is placed.
    jobs: usize,
    /// Its size, when a node's status lists it.
    bytes: Option<u64>,
}

/// One model on one node.
#[derive(Default)]
struct Entry<'a> {
    namespaces: BTreeSet<&'a str>,
    jobs: usize,
    in_use: bool,
}

/// One node: what this pass asks of it and what its cache says.
struct Node<'a> {
    name: &'a str,
    /// Its place in the node names' order (the last tie-break).
    rank: usize,
    live: bool,
    /// Free cache budget, less what this pass already sent there.
    free_bytes: u64,
    /// Models this pass sent there that it neither holds nor fetches.
    prefetched: usize,
    entries: HashMap<usize, Entry<'a>>,
    /// Per model it lists: Ready, or downloading / asked already.
    state: HashMap<usize, Held>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Held {
    Ready,
    InProgress,
}

/// Jobs that ask the same nodes: one model on one class, pods of the same GPUs, as many
/// nodes asked.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct DemandKey<'a> {
    model: usize,
    class: &'a str,
    gpus: u32,
    asked: usize,
}

#[derive(Default)]
struct Demand<'a> {
    namespaces: BTreeSet<&'a str>,
    jobs: usize,
}

/// The interned inputs and the entries built so far.
struct Pass<'i, 'a> {
    input: &'i WantedInput<'a>,
    models: Vec<Model<'a>>,
    model_ids: HashMap<&'a str, usize>,
    nodes: Vec<Node<'a>>,
    node_ids: HashMap<&'a str, usize>,
    /// Per class: its nodes and their free GPUs.
    classes: HashMap<&'a str, Vec<(usize, u32)>>,
}

impl<'i, 'a> Pass<'i, 'a> {
    fn new(input: &'i WantedInput<'a>) -> Self {
        let mut pass = Self {
            input,
            models: Vec::new(),
            model_ids: HashMap::new(),
            nodes: Vec::new(),
            node_ids: HashMap::new(),
            classes: HashMap::new(),
        };
        for job in input.jobs {
            let id = pass.model(&job.model.key, &job.model.repo, &job.model.revision);
            pass.models[id].jobs += 1;
        }
        let free: HashMap<(&str, &str), u32> = input
            .free
            .iter()
            .map(|((class, node), free)| ((class.as_str(), node.as_str()), *free))
            .collect();
        for (class, members) in input.class_nodes {
            let nodes = members
                .iter()
                .map(|node| {
                    let gpus = free.get(&(class.as_str(), node.as_str())).copied();
                    (pass.node(node), gpus.unwrap_or_default())
                })
                .collect();
            pass.classes.insert(class, nodes);
        }
        pass.read_caches();
        let mut by_name: Vec<usize> = (0..pass.nodes.len()).collect();
        by_name.sort_unstable_by_key(|&n| pass.nodes[n].name);
        for (rank, n) in by_name.into_iter().enumerate() {
            pass.nodes[n].rank = rank;
        }
        pass
    }

    fn model(&mut self, key: &'a str, repo: &'a str, revision: &'a str) -> usize {
        *self.model_ids.entry(key).or_insert_with(|| {
            self.models.push(Model {
                key,
                repo,
                revision,
                jobs: 0,
                bytes: None,
            });
            self.models.len() - 1
        })
    }

    fn node(&mut self, name: &'a str) -> usize {
        *self.node_ids.entry(name).or_insert_with(|| {
            self.nodes.push(Node {
                name,
                rank: 0,
                live: false,
                free_bytes: 0,
                prefetched: 0,
                entries: HashMap::new(),
                state: HashMap::new(),
            });
            self.nodes.len() - 1
        })
    }

    /// What each class node's cache holds, fetches or is asked for, of the models jobs want
    /// (matched by repository and revision: no key is built per listed model).
    fn read_caches(&mut self) {
        let by_parts: HashMap<(&str, &str), usize> = self
            .models
            .iter()
            .enumerate()
            .map(|(id, m)| ((m.repo, m.revision), id))
            .collect();
        let caches = self.input.caches;
        for node in &mut self.nodes {
            let Some(cache) = caches.get(node.name) else {
                continue;
            };
            node.live = cache.live;
            node.free_bytes = cache.free_bytes;
            for key in &cache.wanted {
                if let Some(&id) = self.model_ids.get(key.as_str()) {
                    node.state.insert(id, Held::InProgress);
                }
            }
            for held in &cache.held {
                let Some(&id) = by_parts.get(&(held.repo.as_str(), held.revision.as_str())) else {
                    continue;
                };
                let size = held.total_bytes.max(held.bytes);
                if size > 0 {
                    let known = &mut self.models[id].bytes;
                    *known = Some(known.unwrap_or_default().max(size));
                }
                match held.phase {
                    CachedModelPhase::Ready => {
                        node.state.insert(id, Held::Ready);
                    }
                    CachedModelPhase::Fetching | CachedModelPhase::Pending => {
                        node.state.entry(id).or_insert(Held::InProgress);
                    }
                    CachedModelPhase::Failed => {}
                }
            }
        }
    }

    /// `jobs` more jobs of `namespaces` want model `model` on node `node`.
    fn add(
        &mut self,
        node: usize,
        model: usize,
        namespaces: impl IntoIterator<Item = &'a str>,
        jobs: usize,
    ) {
        let entry = self.nodes[node].entries.entry(model).or_default();
        entry.namespaces.extend(namespaces);
        entry.jobs += jobs;
    }

    /// Each job's model on its pods' nodes; each mounted model on its pod's node, in use.
    fn pod_nodes_and_mounts(&mut self) {
        let input = self.input;
        for job in input.jobs {
            let Some(&model) = self.model_ids.get(job.model.key.as_str()) else {
                continue;
            };
            let mut nodes: Vec<usize> = job.pod_nodes.iter().map(|n| self.node(n)).collect();
            nodes.sort_unstable();
            nodes.dedup();
            for node in nodes {
                self.add(node, model, [job.namespace.as_str()], 1);
            }
        }
        for pod in input.mounting {
            let Some((repo, revision)) = pod.key.split_once('@') else {
                continue;
            };
            let model = self.model(&pod.key, repo, revision);
            let node = self.node(&pod.node);
            let entry = self.nodes[node].entries.entry(model).or_default();
            entry.namespaces.insert(&pod.namespace);
            entry.in_use = true;
        }
    }

    /// Each demand's nodes, the most wanted models first.
    fn prefetch(&mut self) {
        let input = self.input;
        let mut demands: HashMap<DemandKey<'a>, Demand<'a>> = HashMap::new();
        for job in input.jobs {
            let Some(&model) = self.model_ids.get(job.model.key.as_str()) else {
                continue;
            };
            let classes: BTreeSet<&str> = job.classes.iter().map(String::as_str).collect();
            for class in classes {
                let key = DemandKey {
                    model,
                    class,
                    gpus: job.gpus_per_pod.max(1),
                    asked: input.prefetch_nodes.max(job.nodes_per_class),
                };
                let demand = demands.entry(key).or_default();
                demand.namespaces.insert(&job.namespace);
                demand.jobs += 1;
            }
        }
        let mut order: Vec<(DemandKey<'a>, Demand<'a>)> = demands.into_iter().collect();
        order.sort_unstable_by_key(|(key, _)| {
            let model = &self.models[key.model];
            (Reverse(model.jobs), model.key, *key)
        });
        for (key, demand) in order {
            for node in self.ranked(key) {
                let target = &self.nodes[node];
                let new_here = !target.state.contains_key(&key.model)
                    && !target.entries.contains_key(&key.model);
                self.add(
                    node,
                    key.model,
                    demand.namespaces.iter().copied(),
                    demand.jobs,
                );
                let size = self.models[key.model].bytes.unwrap_or_default();
                let target = &mut self.nodes[node];
                if new_here {
                    target.prefetched += 1;
                    target.free_bytes = target.free_bytes.saturating_sub(size);
                }
            }
        }
    }

    /// The nodes of `key.class` asked for `key.model`: at most `key.asked`, the best ranked,
    /// among those whose list has room for it.
    fn ranked(&self, key: DemandKey<'a>) -> Vec<usize> {
        let Some(members) = self.classes.get(key.class) else {
            return Vec::new();
        };
        let size = self.models[key.model].bytes;
        let mut ranked: Vec<_> = members
            .iter()
            .filter_map(|&(n, free)| {
                let node = &self.nodes[n];
                let listed = node.entries.contains_key(&key.model);
                if !listed && node.entries.len() >= MAX_MODELS {
                    return None;
                }
                let held = node.state.get(&key.model).copied();
                // Asked already, downloading it, or wanting it in this pass (a pod's node,
                // another demand of the model): no new download there.
                let started = held.is_some() || listed;
                let could_take = node.live && free >= key.gpus;
                let fits = started || size.is_none_or(|bytes| bytes <= node.free_bytes);
                Some((
                    (
                        held != Some(Held::Ready),
                        !could_take,
                        !node.live,
                        !started,
                        !fits,
                        node.prefetched,
                        Reverse(free),
                        Reverse(node.free_bytes),
                        node.rank,
                    ),
                    n,
                ))
            })
            .collect();
        let asked = key.asked.min(ranked.len());
        if asked == 0 {
            return Vec::new();
        }
        if asked < ranked.len() {
            ranked.select_nth_unstable(asked - 1);
            ranked.truncate(asked);
        }
        ranked.sort_unstable();
        ranked.into_iter().map(|(_, n)| n).collect()
    }

    /// Every node's list: in use first, then the most wanted, then by key; at most
    /// `MAX_MODELS`.
    fn specs(self) -> BTreeMap<String, Vec<WantedModel>> {
        let models = &self.models;
        self.nodes
            .into_iter()
            .filter(|node| !node.entries.is_empty())
            .map(|node| {
                let mut entries: Vec<(usize, Entry<'_>)> = node.entries.into_iter().collect();
                entries.sort_unstable_by(|(a, x), (b, y)| {
                    (Reverse(x.in_use), Reverse(x.jobs), models[*a].key).cmp(&(
                        Reverse(y.in_use),
                        Reverse(y.jobs),
                        models[*b].key,
                    ))
                });
                entries.truncate(MAX_MODELS);
                let wanted = entries
                    .into_iter()
                    .map(|(id, entry)| WantedModel {
                        repo: models[id].repo.to_string(),
                        revision: models[id].revision.to_string(),
                        namespaces: entry
                            .namespaces
                            .into_iter()
                            .take(MAX_NAMESPACES)
                            .map(str::to_string)
                            .collect(),
                        in_use: entry.in_use,
                    })
                    .collect();
                (node.name.to_string(), wanted)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramfit_api::Runtime;
    use vramfit_api::model_cache::CachedModel;

    fn model(repo: &str) -> JobModel {
        JobModel {
            repo: repo.to_string(),
            revision: "main".to_string(),
            key: format!("{repo}@main"),
            file: None,
            runtime: Runtime::Vllm,
        }
    }

    fn want(namespace: &str, repo: &str, pods: &[&str], classes: &[&str]) -> JobWant {
        JobWant {
            namespace: namespace.to_string(),
            model: model(repo),
            pod_nodes: pods.iter().map(|s| s.to_string()).collect(),
            classes: classes.iter().map(|s| s.to_string()).collect(),
            nodes_per_class: 0,
            gpus_per_pod: 1,
        }
    }

    fn class_nodes(class: &str, nodes: &[&str]) -> BTreeMap<String, Vec<String>> {
        BTreeMap::from([(
            class.to_string(),
            nodes.iter().map(|s| s.to_string()).collect(),
        )])
    }

    fn listing(repo: &str, phase: CachedModelPhase, bytes: u64) -> CachedModel {
        CachedModel {
            repo: repo.to_string(),
            revision: "main".to_string(),
            phase,
            bytes,
            total_bytes: bytes,
            ..Default::default()
        }
    }

    fn ready_on(repo: &str) -> NodeCache {
        NodeCache {
            held: vec![listing(repo, CachedModelPhase::Ready, 0)],
            wanted: Vec::new(),
            live: true,
            free_bytes: 0,
        }
    }

    /// A live agent with `free_bytes` of its budget left, holding nothing.
    fn live(free_bytes: u64) -> NodeCache {
        NodeCache {
            live: true,
            free_bytes,
            ..NodeCache::default()
        }
    }

    /// Class `c` of `nodes`, each with a live agent, `gpus` free GPUs and 100 bytes of budget.
    struct Class {
        nodes: BTreeMap<String, Vec<String>>,
        caches: BTreeMap<String, NodeCache>,
        free: BTreeMap<(String, String), u32>,
    }

    fn live_class(nodes: &[&str], gpus: u32) -> Class {
        Class {
            nodes: class_nodes("c", nodes),
            caches: nodes.iter().map(|n| (n.to_string(), live(100))).collect(),
            free: nodes
                .iter()
                .map(|n| (("c".to_string(), n.to_string()), gpus))
                .collect(),
        }
    }

    impl Class {
        fn wanted(
            &self,
            jobs: &[JobWant],
            prefetch_nodes: usize,
        ) -> BTreeMap<String, Vec<WantedModel>> {
            wanted_models(&WantedInput {
                jobs,
                mounting: &[],
                class_nodes: &self.nodes,
                caches: &self.caches,
                free: &self.free,
                prefetch_nodes,
            })
        }
    }

    fn keys(models: &[WantedModel]) -> Vec<String> {
        models.iter().map(WantedModel::key).collect()
    }

    /// The nodes asked to hold `key`, by name.
    fn holders(out: &BTreeMap<String, Vec<WantedModel>>, key: &str) -> Vec<String> {
        out.iter()
            .filter(|(_, models)| models.iter().any(|m| m.key() == key))
            .map(|(node, _)| node.clone())
            .collect()
    }

    #[test]
    fn prefetch_takes_ready_nodes_first_then_by_name_and_pod_nodes_always() {
        let jobs = [want("a", "o/m", &["z-9"], &["l40s"])];
        let classes = class_nodes("l40s", &["n-4", "n-3", "n-1", "n-2"]);
        let caches = BTreeMap::from([("n-4".to_string(), ready_on("o/m"))]);
        let out = wanted_models(&WantedInput {
            jobs: &jobs,
            mounting: &[],
            class_nodes: &classes,
            caches: &caches,
            free: &BTreeMap::new(),
            prefetch_nodes: 2,
        });
        let nodes: Vec<&String> = out.keys().collect();
        assert_eq!(
            nodes,
            ["n-1", "n-4", "z-9"],
            "Ready n-4, then n-1 by name, and the pod's node"
        );
        assert_eq!(keys(&out["n-1"]), ["o/m@main"]);
    }

    #[test]
    fn a_group_s_class_asks_at_least_as_many_nodes_as_the_group_has_pods() {
        let classes = class_nodes("c", &["n-1", "n-2", "n-3", "n-4"]);
        let caches = BTreeMap::new();
        let asked = |pods: usize| {
            let mut group = want("a", "o/m", &[], &["c"]);
            group.nodes_per_class = pods;
            let out = wanted_models(&WantedInput {
                jobs: &[group],
                mounting: &[],
                class_nodes: &classes,
                caches: &caches,
                free: &BTreeMap::new(),
                prefetch_nodes: 1,
            });
            out.into_keys().collect::<Vec<String>>()
        };
        assert_eq!(
            asked(3),
            ["n-1", "n-2", "n-3"],
            "three pods: three nodes, not one"
        );
        assert_eq!(asked(0), ["n-1"], "one pod: prefetch_nodes");
    }

    #[test]
    fn namespaces_are_sorted_and_deduplicated_and_in_use_comes_first() {
        let jobs = [
            want("team-b", "o/popular", &[], &["c"]),
            want("team-a", "o/popular", &[], &["c"]),
            want("team-a", "o/popular", &[], &["c"]),
            want("team-a", "o/other", &[], &["c"]),
        ];
        let mounting = [MountingPod {
            node: "n-1".into(),
            namespace: "team-c".into(),
            key: "o/old@v1".into(),
        }];
        let classes = class_nodes("c", &["n-1"]);
        let out = wanted_models(&WantedInput {
            jobs: &jobs,
            mounting: &mounting,
            class_nodes: &classes,
            caches: &BTreeMap::new(),
            free: &BTreeMap::new(),
            prefetch_nodes: 4,
        });
        let models = &out["n-1"];
        assert_eq!(keys(models), ["o/old@v1", "o/popular@main", "o/other@main"]);
        assert!(models[0].in_use && !models[1].in_use);
        assert_eq!(models[1].namespaces, ["team-a", "team-b"]);
        assert_eq!(models[0].revision, "v1");
    }

    #[test]
    fn a_node_holds_at_most_max_models_and_namespaces_are_capped() {
        let jobs: Vec<JobWant> = (0..MAX_MODELS + 5)
            .map(|i| want("ns", &format!("o/m{i:03}"), &["n"], &[]))
            .collect();
        let many: Vec<JobWant> = (0..MAX_NAMESPACES + 3)
            .map(|i| want(&format!("ns-{i:02}"), "o/shared", &["n"], &[]))
            .collect();
        let all: Vec<JobWant> = jobs.into_iter().chain(many).collect();
        let out = wanted_models(&WantedInput {
            jobs: &all,
            mounting: &[],
            class_nodes: &BTreeMap::new(),
            caches: &BTreeMap::new(),
            free: &BTreeMap::new(),
            prefetch_nodes: 4,
        });
        let models = &out["n"];
        assert_eq!(models.len(), MAX_MODELS);
        assert_eq!(models[0].key(), "o/shared@main", "the most wanted first");
        assert_eq!(models[0].namespaces.len(), MAX_NAMESPACES);
        assert_eq!(models[1].key(), "o/m000@main", "then by key");
    }

    #[test]
    fn a_full_class_still_asks_the_node_a_replica_would_wait_for() {
        // a-1..a-3 are full; a-4 has room and a live agent: the replica waits for a-4, so
        // a-4 is asked even with one prefetch node (before it by name, a-1 would be).
        let nodes = class_nodes("a", &["a-1", "a-2", "a-3", "a-4", "a-5"]);
        let caches: BTreeMap<String, NodeCache> = ["a-1", "a-2", "a-3", "a-4"]
            .into_iter()
            .map(|n| (n.to_string(), live(0)))
            .collect();
        let mut free: BTreeMap<(String, String), u32> = ["a-1", "a-2", "a-3", "a-4", "a-5"]
            .into_iter()
            .map(|n| (("a".to_string(), n.to_string()), 0))
            .collect();
        free.insert(("a".into(), "a-4".into()), 2);
        // a-5 has room but no agent: it cannot download the model.
        free.insert(("a".into(), "a-5".into()), 8);
        let mut job = want("ns", "o/m", &[], &["a"]);
        job.gpus_per_pod = 2;
        let wanted = |free: &BTreeMap<(String, String), u32>, job: &JobWant| {
            wanted_models(&WantedInput {
                jobs: std::slice::from_ref(job),
                mounting: &[],
                class_nodes: &nodes,
                caches: &caches,
                free,
                prefetch_nodes: 1,
            })
        };
        let out = wanted(&free, &job);
        assert_eq!(out.keys().collect::<Vec<_>>(), vec!["a-4"], "{out:?}");
        // A pod of 4 GPUs fits nowhere: the live node with the most GPUs free is asked (a-5,
        // with more, has no agent to fetch it).
        job.gpus_per_pod = 4;
        let out = wanted(&free, &job);
        assert_eq!(out.keys().collect::<Vec<_>>(), vec!["a-4"], "{out:?}");
    }

    #[test]
    fn prefetch_spreads_the_models_of_a_class_over_its_nodes() {
        // Eight nodes alike, two asked per model: before, every model went to n-1 and n-2.
        let nodes = ["n-1", "n-2", "n-3", "n-4", "n-5", "n-6", "n-7", "n-8"];
        let class = live_class(&nodes, 4);
        let jobs: Vec<JobWant> = ["o/a", "o/b", "o/c", "o/d"]
            .iter()
            .map(|repo| want("ns", repo, &[], &["c"]))
            .collect();
        let out = class.wanted(&jobs, 2);
        assert_eq!(out.len(), 8, "every node asked: {out:?}");
        assert!(out.values().all(|models| models.len() == 1), "{out:?}");
        for repo in ["o/a", "o/b", "o/c", "o/d"] {
            assert_eq!(holders(&out, &format!("{repo}@main")).len(), 2, "{repo}");
        }
        // The same again from the specs just written: each model stays where it was asked.
        let mut again = live_class(&nodes, 4);
        for (node, models) in &out {
            again.caches.get_mut(node).unwrap().wanted = keys(models);
        }
        assert_eq!(again.wanted(&jobs, 2), out, "no churn from pass to pass");
    }

    #[test]
    fn prefetch_takes_more_free_gpus_then_more_free_budget_first() {
        let mut class = live_class(&["n-1", "n-2", "n-3", "n-4"], 1);
        class.free.insert(("c".into(), "n-2".into()), 4);
        class.free.insert(("c".into(), "n-3".into()), 4);
        class.free.insert(("c".into(), "n-4".into()), 2);
        class.caches.insert("n-2".into(), live(10));
        class.caches.insert("n-3".into(), live(500));
        let jobs = [want("ns", "o/m", &[], &["c"])];
        assert_eq!(
            class.wanted(&jobs, 1).into_keys().collect::<Vec<_>>(),
            ["n-3"]
        );
        assert_eq!(
            class.wanted(&jobs, 3).into_keys().collect::<Vec<_>>(),
            ["n-2", "n-3", "n-4"]
        );
    }

    #[test]
    fn a_model_goes_first_where_it_fits_the_free_budget() {
        // o/m is 50 bytes (n-3 lists it failed); n-1 has more GPUs free but 10 bytes left.
        let mut class = live_class(&["n-1", "n-2", "n-3"], 1);
        class.free.insert(("c".into(), "n-1".into()), 4);
        class.caches.insert("n-1".into(), live(10));
        class.caches.insert("n-2".into(), live(60));
        class.caches.get_mut("n-3").unwrap().held =
            vec![listing("o/m", CachedModelPhase::Failed, 50)];
        class.caches.get_mut("n-3").unwrap().free_bytes = 0;
        let jobs = [want("ns", "o/m", &[], &["c"])];
        assert_eq!(
            class.wanted(&jobs, 1).into_keys().collect::<Vec<_>>(),
            ["n-2"]
        );
    }

    #[test]
    fn a_node_already_downloading_the_model_keeps_it() {
        let mut class = live_class(&["n-1", "n-2", "n-3"], 1);
        class.free.insert(("c".into(), "n-1".into()), 4);
        class.caches.get_mut("n-3").unwrap().held =
            vec![listing("o/m", CachedModelPhase::Fetching, 5)];
        let jobs = [want("ns", "o/m", &[], &["c"])];
        assert_eq!(
            class.wanted(&jobs, 1).into_keys().collect::<Vec<_>>(),
            ["n-3"]
        );
    }

    #[test]
    fn a_full_list_passes_the_model_on_and_only_a_full_class_cuts_one() {
        // Two nodes, one asked per model, twice as many models as a list holds: before, all
        // went to n-1 and half were cut there, asked on no node while their jobs waited.
        let class = live_class(&["n-1", "n-2"], 1);
        let repos: Vec<String> = (0..=2 * MAX_MODELS).map(|i| format!("o/m{i:03}")).collect();
        let mut jobs: Vec<JobWant> = repos.iter().map(|r| want("ns", r, &[], &["c"])).collect();
        let out = class.wanted(&jobs[1..], 1);
        assert!(
            out.values().all(|m| m.len() == MAX_MODELS),
            "both lists full"
        );
        let asked = |out: &BTreeMap<String, Vec<WantedModel>>, repo: &str| {
            !holders(out, &format!("{repo}@main")).is_empty()
        };
        assert!(
            repos[1..].iter().all(|r| asked(&out, r)),
            "2 × 64 models: all asked"
        );
        // One more model than both lists hold, the first the most wanted: only the least
        // wanted, last by key, is cut.
        jobs.push(want("ns", &repos[0], &[], &["c"]));
        let out = class.wanted(&jobs, 1);
        let cut: Vec<&String> = repos.iter().filter(|r| !asked(&out, r)).collect();
        assert_eq!(cut, [&repos[2 * MAX_MODELS]]);
    }

    #[test]
    fn jobs_of_one_model_with_other_pod_sizes_share_its_nodes() {
        // Pods of 1 and of 2 GPUs rank apart, but the second is sent where the first went:
        // one model is downloaded on two nodes, not four.
        let class = live_class(&["n-1", "n-2", "n-3", "n-4"], 4);
        let mut two = want("ns", "o/m", &[], &["c"]);
        two.gpus_per_pod = 2;
        let out = class.wanted(&[want("ns", "o/m", &[], &["c"]), two], 2);
        assert_eq!(out.into_keys().collect::<Vec<_>>(), ["n-1", "n-2"]);
    }
}
