//! The models each GPU node's cache should hold (pure): every served job with the cache on
//! wants its model on the nodes its pods run on, and ahead of its pods on a few nodes of each
//! class its replicas are planned on — the nodes holding it Ready first, then those whose live
//! agent can fetch it with room for a pod, then by name, at most `prefetch_nodes` per class. A model a live pod mounts is wanted on that pod's node (in use:
//! never evicted), whichever job it belongs to. Each node keeps at most `MAX_MODELS`: the ones
//! in use first, then those most jobs want, then by key.
use std::collections::{BTreeMap, BTreeSet};

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

#[derive(Default)]
struct Entry {
    repo: String,
    revision: String,
    namespaces: BTreeSet<String>,
    jobs: usize,
    in_use: bool,
}

/// The desired `spec.models` of every node that should hold any model (nodes absent want
/// nothing).
pub fn wanted_models(input: &WantedInput<'_>) -> BTreeMap<String, Vec<WantedModel>> {
    let mut nodes: BTreeMap<String, BTreeMap<String, Entry>> = BTreeMap::new();
    for job in input.jobs {
        for node in job_nodes(job, input) {
            let entry = nodes
                .entry(node)
                .or_default()
                .entry(job.model.key.clone())
                .or_default();
            entry.repo.clone_from(&job.model.repo);
            entry.revision.clone_from(&job.model.revision);
            entry.namespaces.insert(job.namespace.clone());
            entry.jobs += 1;
        }
    }
    for pod in input.mounting {
        let Some((repo, revision)) = pod.key.split_once('@') else {
            continue;
        };
        let entry = nodes
            .entry(pod.node.clone())
            .or_default()
            .entry(pod.key.clone())
            .or_default();
        entry.repo = repo.to_string();
        entry.revision = revision.to_string();
        entry.namespaces.insert(pod.namespace.clone());
        entry.in_use = true;
    }
    nodes
        .into_iter()
        .map(|(node, entries)| {
            let mut entries: Vec<(String, Entry)> = entries.into_iter().collect();
            // In use first, then the most wanted, then by key (the map's order, kept by the
            // stable sort).
            entries.sort_by(|(_, a), (_, b)| b.in_use.cmp(&a.in_use).then(b.jobs.cmp(&a.jobs)));
            entries.truncate(MAX_MODELS);
            let models = entries
                .into_iter()
                .map(|(_, e)| WantedModel {
                    repo: e.repo,
                    revision: e.revision,
                    namespaces: e.namespaces.into_iter().take(MAX_NAMESPACES).collect(),
                    in_use: e.in_use,
                })
                .collect();
            (node, models)
        })
        .collect()
}

/// The nodes `job` wants its model on: its pods' nodes, and per planned class the nodes
/// holding it Ready first, then those with a live agent and room for a pod, then by name, at
/// most `prefetch_nodes` (at least a group's pods).
fn job_nodes(job: &JobWant, input: &WantedInput<'_>) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = job.pod_nodes.iter().cloned().collect();
    let classes: BTreeSet<&String> = job.classes.iter().collect();
    for class in classes {
        let Some(members) = input.class_nodes.get(class) else {
            continue;
        };
        let cache = |node: &String| input.caches.get(node);
        let ready = |node: &String| {
            cache(node)
                .and_then(|c| c.model(&job.model.key))
                .is_some_and(|m| m.phase == CachedModelPhase::Ready)
        };
        // A node whose live agent can download the model and that has room for a pod: the
        // one a replica waits for (placement waits for such nodes, by name), so it must be
        // among those asked even when nodes before it by name are full.
        let could_take = |node: &String| {
            cache(node).is_some_and(|c| c.live)
                && input
                    .free
                    .get(&(class.clone(), node.clone()))
                    .is_some_and(|free| *free >= job.gpus_per_pod.max(1))
        };
        let mut ranked: Vec<&String> = members.iter().collect();
        ranked.sort_by(|a, b| {
            ready(b)
                .cmp(&ready(a))
                .then(could_take(b).cmp(&could_take(a)))
                .then(a.cmp(b))
        });
        let asked = input.prefetch_nodes.max(job.nodes_per_class);
        out.extend(ranked.into_iter().take(asked).cloned());
    }
    out
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

    fn ready_on(repo: &str) -> NodeCache {
        NodeCache {
            held: vec![CachedModel {
                repo: repo.to_string(),
                revision: "main".to_string(),
                phase: CachedModelPhase::Ready,
                ..Default::default()
            }],
            wanted: Vec::new(),
            live: true,
        }
    }

    fn keys(models: &[WantedModel]) -> Vec<String> {
        models.iter().map(WantedModel::key).collect()
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
        let live = NodeCache {
            live: true,
            ..NodeCache::default()
        };
        let caches: BTreeMap<String, NodeCache> = ["a-1", "a-2", "a-3", "a-4"]
            .into_iter()
            .map(|n| (n.to_string(), live.clone()))
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
        // A pod of 4 GPUs fits nowhere: the first by name is asked, as before.
        job.gpus_per_pod = 4;
        let out = wanted(&free, &job);
        assert_eq!(out.keys().collect::<Vec<_>>(), vec!["a-1"], "{out:?}");
    }
}
