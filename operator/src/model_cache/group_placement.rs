//! Where a group's weights come from (pure): a batch group attempt's, or a served replica's
//! whose plan spans nodes — N pods of G GPUs on class C, one per node (`--group-spread
//! node`), all mounting the model or none.
//!
//! * at least N nodes of C with G GPUs free hold the model mountable for the namespace →
//!   every pod mounts it: one volume and claim for the job (a read-only `hostPath` volume,
//!   `ReadOnlyMany`, that each pod's node serves from its own folder), and each pod's
//!   required node affinity lists the holding nodes, ANDed with the class's terms; the
//!   group's pod anti-affinity then puts the N pods on N distinct ones of them;
//! * fewer, but enough live nodes of C with room download it or will be asked to → the
//!   group waits (no pod), within `--model-cache-wait-seconds`;
//! * otherwise every pod fetches the model itself, and says why.
//!
//! The same decision serves a served replica whose plan spans nodes ([`decide_pods`]: a
//! replica of one pod as [`decide`], a replica of N pods as a group).
//!
//! A llama.cpp leader is created after its workers: [`mount_like`] gives it the workers'
//! mount, so the group stays all or nothing.
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use vramfit_api::model_cache::WeightsSource;

use super::job_model::JobModel;
use super::mount::{VOLUME_NAME, mark_note, mark_source, mount_pod};
use super::placement::{CacheAsk, CachePlacement, Decide, decide};
use super::weights::parse_source;
use super::{WEIGHTS_NOTE_ANNOTATION, WEIGHTS_SOURCE_ANNOTATION};
use crate::capacity::HOSTNAME_TOPOLOGY;

/// What one group's cache decision reads.
#[derive(Clone, Debug)]
pub struct GroupAsk<'a> {
    /// The model and the caches.
    pub ask: CacheAsk<'a>,
    /// The group's class.
    pub class: &'a str,
    /// GPUs per pod.
    pub gpus: u32,
    /// The group's pods.
    pub pods: u32,
    /// When the group started waiting for its model, if it does.
    pub waited_since: Option<Time>,
    /// Now.
    pub now: &'a Time,
    /// Whether the group may wait.
    pub may_wait: bool,
}

/// Where the group's weights come from: mounted only when the holders take all its pods.
pub fn decide_group(g: &GroupAsk<'_>) -> CachePlacement {
    decide(&Decide {
        ask: g.ask,
        class: g.class,
        gpus: g.gpus,
        pods: g.pods,
        one_pod_per_node: g.ask.view.one_pod_per_node,
        waited_since: g.waited_since.clone(),
        now: g.now,
        may_wait: g.may_wait,
    })
}

/// Where the weights of one unit of pods come from: one pod (a served replica of one node)
/// as [`decide`] says; a group of `g.pods` (a served replica whose plan spans nodes) as
/// [`decide_group`]: all its pods mount, or it waits, or all fetch.
pub fn decide_pods(g: &GroupAsk<'_>) -> CachePlacement {
    if g.pods > 1 {
        return decide_group(g);
    }
    decide(&Decide {
        ask: g.ask,
        class: g.class,
        gpus: g.gpus,
        pods: 1,
        one_pod_per_node: true,
        waited_since: g.waited_since.clone(),
        now: g.now,
        may_wait: g.may_wait,
    })
}

/// The model mount of `worker` (a pod of the same group), given to `leader`: its claim, the
/// nodes of its affinity, its source; or, for a worker that fetches its model, the same
/// source and note. Nothing when the worker says nothing of its weights.
pub fn mount_like(leader: &mut Pod, worker: &Pod, model: &JobModel) {
    let annotations = worker.metadata.annotations.as_ref();
    let Some(source) = annotations
        .and_then(|a| a.get(WEIGHTS_SOURCE_ANNOTATION))
        .and_then(|s| parse_source(s))
    else {
        return;
    };
    let spec = worker.spec.as_ref();
    let claim = spec
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .find(|v| v.name == VOLUME_NAME)
        .and_then(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.clone());
    let nodes: Vec<String> = spec
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .and_then(|r| r.node_selector_terms.first())
        .and_then(|t| t.match_expressions.as_ref())
        .into_iter()
        .flatten()
        .filter(|e| e.key == HOSTNAME_TOPOLOGY && e.operator == "In")
        .flat_map(|e| e.values.clone().unwrap_or_default())
        .collect();
    match claim {
        Some(claim) if source != WeightsSource::FetchedByPod && !nodes.is_empty() => {
            mount_pod(leader, model, &claim, &nodes, source);
        }
        _ => {
            mark_source(leader, WeightsSource::FetchedByPod);
            if let Some(note) = annotations.and_then(|a| a.get(WEIGHTS_NOTE_ANNOTATION)) {
                mark_note(leader, note);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model_cache::attempt_placement::tests::{at, held, model, view};
    use vramfit_api::model_cache::CachedModelPhase;

    fn run(
        v: &crate::model_cache::view::CacheView,
        namespace: &str,
        pods: u32,
        since: Option<i64>,
        now: i64,
    ) -> CachePlacement {
        let m = model();
        decide_group(&GroupAsk {
            ask: CacheAsk {
                view: v,
                namespace,
                model: &m,
            },
            class: "c",
            gpus: 2,
            pods,
            waited_since: since.map(at),
            now: &at(now),
            may_wait: true,
        })
    }

    fn ready() -> Option<vramfit_api::model_cache::CachedModel> {
        Some(held(CachedModelPhase::Ready, &[]))
    }

    #[test]
    fn a_group_of_n_mounts_only_when_n_nodes_with_room_hold_the_model() {
        let mut two = view(3, 2, &[ready(), None, ready()]);
        two.one_pod_per_node = true;
        let CachePlacement::Mount { nodes, source, .. } = run(&two, "a", 2, None, 0) else {
            panic!("two holders take a group of two");
        };
        assert_eq!(nodes, vec!["n-1".to_string(), "n-3".to_string()]);
        assert_eq!(source, WeightsSource::CacheHit);
        // One holder for a group of two, nobody downloading: every pod fetches, and says why.
        let one = {
            let mut v = view(3, 2, &[ready()]);
            v.one_pod_per_node = true;
            v
        };
        let CachePlacement::FetchedByPod { why: Some(why) } = run(&one, "a", 2, None, 0) else {
            panic!("one holder is not enough");
        };
        assert!(why.contains("1 of the group's 2 pods"), "{why}");
        // A holder without the plan's GPUs free does not count.
        let mut full = two.clone();
        full.free.insert(("c".into(), "n-3".into()), 1);
        assert!(matches!(
            run(&full, "a", 2, None, 0),
            CachePlacement::FetchedByPod { .. }
        ));
    }

    /// A served replica whose plan spans two nodes is a group of two: one holder mounts a
    /// replica of one pod, not a replica of two, which waits for the second node's download
    /// or fetches in every pod.
    #[test]
    fn a_replica_of_two_nodes_needs_two_holders_where_a_replica_of_one_needs_one() {
        let m = model();
        let ask = |v: &'_ crate::model_cache::view::CacheView, pods: u32, may_wait: bool| {
            decide_pods(&GroupAsk {
                ask: CacheAsk {
                    view: v,
                    namespace: "a",
                    model: &m,
                },
                class: "c",
                gpus: 2,
                pods,
                waited_since: None,
                now: &at(100),
                may_wait,
            })
        };
        let mut one = view(3, 2, &[ready()]);
        one.one_pod_per_node = true;
        let CachePlacement::Mount { nodes, .. } = ask(&one, 1, true) else {
            panic!("a replica of one pod mounts from the one holder");
        };
        assert_eq!(nodes, vec!["n-1".to_string()]);
        let CachePlacement::FetchedByPod { why: Some(why) } = ask(&one, 2, true) else {
            panic!("a replica of two pods is not mounted from one holder");
        };
        assert!(why.contains("1 of the group's 2 pods"), "{why}");
        // n-2 downloads it: the replica of two waits for it (a new replica may wait).
        let mut downloading = view(
            3,
            2,
            &[ready(), Some(held(CachedModelPhase::Fetching, &[]))],
        );
        downloading.one_pod_per_node = true;
        let CachePlacement::Wait { message } = ask(&downloading, 2, true) else {
            panic!("the second node downloads it: the replica waits");
        };
        assert!(
            message.starts_with("waiting for node n-2 to download o/m@main"),
            "{message}"
        );
        // A surge group never waits: it fetches in every pod.
        assert!(matches!(
            ask(&downloading, 2, false),
            CachePlacement::FetchedByPod { .. }
        ));
        // Two holders: every pod of the replica mounts, kept to both.
        let mut two = view(3, 2, &[ready(), ready()]);
        two.one_pod_per_node = true;
        let CachePlacement::Mount { nodes, source, .. } = ask(&two, 2, true) else {
            panic!("two holders take a replica of two");
        };
        assert_eq!(nodes, vec!["n-1".to_string(), "n-2".to_string()]);
        assert_eq!(source, WeightsSource::CacheHit);
    }

    #[test]
    fn a_group_waits_while_enough_nodes_download_the_rest() {
        let mut v = view(
            3,
            2,
            &[ready(), Some(held(CachedModelPhase::Fetching, &[])), None],
        );
        v.one_pod_per_node = true;
        let CachePlacement::Wait { message } = run(&v, "a", 2, None, 100) else {
            panic!("n-1 holds it and n-2 downloads it: the group waits");
        };
        assert!(
            message.starts_with("waiting for node n-2 to download o/m@main"),
            "{message}"
        );
        // A group of three needs one more: a live agent on n-3 will be asked at the next sync.
        if let Some(n3) = v.nodes.get_mut("n-3") {
            n3.live = true;
        }
        let CachePlacement::Wait { message } = run(&v, "a", 3, None, 100) else {
            panic!("n-2 downloads and n-3 will: the group of three waits");
        };
        assert!(
            message.starts_with("waiting for nodes n-2, n-3 to download"),
            "{message}"
        );
        // The deadline: every pod fetches (the sync asked n-3 long before).
        if let Some(n3) = v.nodes.get_mut("n-3") {
            n3.wanted = vec!["o/m@main".into()];
        }
        let CachePlacement::FetchedByPod { why: Some(why) } = run(&v, "a", 3, Some(100), 1000)
        else {
            panic!("the wait ran out");
        };
        assert!(why.contains("waited 900 s for nodes n-2, n-3"), "{why}");
    }

    #[test]
    fn a_private_model_of_another_namespace_does_not_count_for_the_group() {
        let mine = Some(held(CachedModelPhase::Ready, &["team-a"]));
        let mut v = view(2, 2, &[mine.clone(), mine]);
        v.one_pod_per_node = true;
        assert!(matches!(
            run(&v, "team-a", 2, None, 0),
            CachePlacement::Mount { .. }
        ));
        assert_eq!(
            run(&v, "team-b", 2, None, 0),
            CachePlacement::FetchedByPod { why: None },
            "team-b's group fetches; no note tells it what another namespace holds"
        );
    }

    #[test]
    fn ranks_that_may_share_a_node_count_its_free_gpus_in_pods() {
        // `--group-spread none`: one holder with 4 GPUs free takes two pods of 2.
        let v = view(1, 4, &[ready()]);
        assert!(!v.one_pod_per_node);
        assert!(matches!(
            run(&v, "a", 2, None, 0),
            CachePlacement::Mount { .. }
        ));
    }

    #[test]
    fn a_leader_made_after_its_workers_mounts_as_they_do() {
        let m = model();
        let mut worker = Pod {
            spec: Some(Default::default()),
            ..Pod::default()
        };
        worker.spec.as_mut().unwrap().affinity = Some(k8s_openapi::api::core::v1::Affinity {
            node_affinity: Some(k8s_openapi::api::core::v1::NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(
                    k8s_openapi::api::core::v1::NodeSelector {
                        node_selector_terms: vec![Default::default()],
                    },
                ),
                ..Default::default()
            }),
            ..Default::default()
        });
        let mut leader = worker.clone();
        mount_pod(
            &mut worker,
            &m,
            "job-model-1",
            &["n-1".into(), "n-2".into()],
            WeightsSource::CacheHit,
        );
        mount_like(&mut leader, &worker, &m);
        assert_eq!(
            leader.spec, worker.spec,
            "the same volume, mount, affinity and env"
        );
        assert_eq!(leader.metadata.annotations, worker.metadata.annotations);
        // A worker that fetches: the leader fetches too, with the same note.
        let mut fetching = Pod::default();
        mark_source(&mut fetching, WeightsSource::FetchedByPod);
        mark_note(&mut fetching, "no node holds it");
        let mut alone = Pod::default();
        mount_like(&mut alone, &fetching, &m);
        assert_eq!(alone.metadata.annotations, fetching.metadata.annotations);
    }
}
