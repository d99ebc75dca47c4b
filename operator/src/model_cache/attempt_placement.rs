//! Where a batch attempt's weights come from (pure): the one pod of an attempt, or the N pods
//! of a group attempt ([`super::group_placement`]), made on class C. The class was preferred
//! among equal-rank plans for holding the model ([`super::placement::prefer_cached_class`]);
//! then [`decide_attempt`] says mount, wait or fetch ([`super::placement::decide`]).
//!
//! A waiting attempt has no pod and no attempt entry yet: the job's `Scheduled` condition is
//! False with reason `WaitingForModel` and a message that ends " since <time>" — read back by
//! [`waited_since`] so that the deadline counts from the first wait, across reconciles.
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use vramfit_api::InferenceJobStatus;
use vramfit_api::conditions::{self, ConditionType};

use super::WAITING_REASON;
use super::group_placement;
use super::placement::{CacheAsk, CachePlacement, Decide, decide, wait_started};

/// What one attempt's cache decision reads.
#[derive(Clone, Copy, Debug)]
pub struct AttemptAsk<'a> {
    /// The model and the caches.
    pub ask: CacheAsk<'a>,
    /// The attempt's class.
    pub class: &'a str,
    /// The plan's GPUs per pod.
    pub gpus: u32,
    /// The plan's pods (its nodes: 1, or a group's N).
    pub pods: u32,
    /// The job's status before this decision (where a wait started).
    pub status: &'a InferenceJobStatus,
    /// Now.
    pub now: &'a Time,
    /// Whether the attempt may wait for a node to download the model: a new attempt may; a
    /// pod made again for an attempt that runs already may not.
    pub may_wait: bool,
}

/// When the job's next attempt started waiting for its model, while it does.
pub fn waited_since(status: &InferenceJobStatus) -> Option<Time> {
    let scheduled = conditions::get(&status.conditions, ConditionType::Scheduled)?;
    (scheduled.reason == WAITING_REASON)
        .then(|| wait_started(Some(&scheduled.message)))
        .flatten()
}

/// Where the attempt's weights come from: a plan of one node is one pod; a plan of N nodes
/// is a group that mounts only when N nodes hold the model ([`group_placement::decide_group`]).
pub fn decide_attempt(a: &AttemptAsk<'_>) -> CachePlacement {
    let waited_since = waited_since(a.status);
    if a.pods > 1 {
        return group_placement::decide_group(&group_placement::GroupAsk {
            ask: a.ask,
            class: a.class,
            gpus: a.gpus,
            pods: a.pods,
            waited_since,
            now: a.now,
            may_wait: a.may_wait,
        });
    }
    decide(&Decide {
        ask: a.ask,
        class: a.class,
        gpus: a.gpus,
        pods: 1,
        one_pod_per_node: true,
        waited_since,
        now: a.now,
        may_wait: a.may_wait,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model_cache::job_model::JobModel;
    use crate::model_cache::view::{CacheView, NodeCache};
    use k8s_openapi::jiff::Timestamp;
    use std::time::Duration;
    use vramfit_api::Runtime;
    use vramfit_api::conditions::{ConditionsUpdate, Reason};
    use vramfit_api::model_cache::{CachedModel, CachedModelPhase, WeightsSource};

    pub(crate) fn model() -> JobModel {
        JobModel {
            repo: "o/m".into(),
            revision: "main".into(),
            key: "o/m@main".into(),
            file: None,
            runtime: Runtime::Vllm,
        }
    }

    pub(crate) fn held(phase: CachedModelPhase, namespaces: &[&str]) -> CachedModel {
        CachedModel {
            repo: "o/m".into(),
            revision: "main".into(),
            phase,
            bytes: 10,
            total_bytes: 40,
            public: namespaces.is_empty(),
            namespaces: namespaces.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    /// Nodes `n-1`…`n-<count>` of class `c`, `free` GPUs each; `caches[i]` what node i holds.
    pub(crate) fn view(count: usize, free: u32, caches: &[Option<CachedModel>]) -> CacheView {
        let mut view = CacheView::default();
        view.settings.wait = Duration::from_secs(900);
        for i in 1..=count {
            let node = format!("n-{i}");
            view.free.insert(("c".into(), node.clone()), free);
            let held = caches.get(i - 1).cloned().flatten();
            view.nodes.insert(
                node,
                NodeCache {
                    held: held.into_iter().collect(),
                    wanted: Vec::new(),
                    live: false,
                    free_bytes: 0,
                },
            );
        }
        view
    }

    pub(crate) fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    fn run(
        view: &CacheView,
        namespace: &str,
        status: &InferenceJobStatus,
        now: i64,
    ) -> CachePlacement {
        let m = model();
        decide_attempt(&AttemptAsk {
            ask: CacheAsk {
                view,
                namespace,
                model: &m,
            },
            class: "c",
            gpus: 1,
            pods: 1,
            status,
            now: &at(now),
            may_wait: true,
        })
    }

    /// A status whose Scheduled condition says the attempt waits, as the hook writes it.
    fn waiting_status(message: &str) -> InferenceJobStatus {
        let mut status = InferenceJobStatus::default();
        ConditionsUpdate::new(&mut status.conditions, None, &at(0)).set(
            ConditionType::Scheduled,
            false,
            Reason::WaitingForModel,
            message,
        );
        status
    }

    #[test]
    fn a_new_attempt_mounts_the_model_a_node_of_its_class_holds() {
        let v = view(2, 1, &[None, Some(held(CachedModelPhase::Ready, &[]))]);
        assert_eq!(
            run(&v, "a", &InferenceJobStatus::default(), 100),
            CachePlacement::Mount {
                source: WeightsSource::CacheHit,
                nodes: vec!["n-2".into()],
                total_bytes: 40,
            }
        );
    }

    #[test]
    fn a_new_attempt_waits_while_a_node_downloads_then_mounts_as_fetched_by_node() {
        let fetching = view(1, 1, &[Some(held(CachedModelPhase::Fetching, &[]))]);
        let CachePlacement::Wait { message } =
            run(&fetching, "a", &InferenceJobStatus::default(), 1000)
        else {
            panic!("waits");
        };
        assert!(
            message.starts_with("waiting for node n-1 to download o/m@main"),
            "{message}"
        );
        // The next reconcile reads the start back from the condition.
        let status = waiting_status(&message);
        assert_eq!(waited_since(&status), Some(at(1000)));
        assert!(matches!(
            run(&fetching, "a", &status, 1899),
            CachePlacement::Wait { .. }
        ));
        let CachePlacement::FetchedByPod { why: Some(why) } = run(&fetching, "a", &status, 1900)
        else {
            panic!("the wait ran out");
        };
        assert!(why.contains("waited 900 s for node n-1"), "{why}");
        // Ready now: mounted, and said to be the node's download.
        let ready = view(1, 1, &[Some(held(CachedModelPhase::Ready, &[]))]);
        assert!(matches!(
            run(&ready, "a", &status, 1500),
            CachePlacement::Mount {
                source: WeightsSource::FetchedByNode,
                ..
            }
        ));
        // A condition of another reason is no wait.
        let mut other = status.clone();
        other.conditions[0].reason = "NoClassFits".into();
        assert_eq!(waited_since(&other), None);
    }

    #[test]
    fn no_node_holding_or_fetching_the_model_means_the_pod_fetches_it() {
        let none = view(2, 1, &[]);
        assert_eq!(
            run(&none, "a", &InferenceJobStatus::default(), 0),
            CachePlacement::FetchedByPod { why: None }
        );
    }

    #[test]
    fn a_private_model_of_another_namespace_is_not_mounted() {
        let v = view(1, 1, &[Some(held(CachedModelPhase::Ready, &["team-a"]))]);
        assert!(matches!(
            run(&v, "team-a", &InferenceJobStatus::default(), 0),
            CachePlacement::Mount { .. }
        ));
        assert_eq!(
            run(&v, "team-b", &InferenceJobStatus::default(), 0),
            CachePlacement::FetchedByPod { why: None },
            "team-b fetches; no note tells it what another namespace holds"
        );
    }

    #[test]
    fn a_pod_made_again_for_a_running_attempt_never_waits() {
        let fetching = view(1, 1, &[Some(held(CachedModelPhase::Fetching, &[]))]);
        let m = model();
        let placement = decide_attempt(&AttemptAsk {
            ask: CacheAsk {
                view: &fetching,
                namespace: "a",
                model: &m,
            },
            class: "c",
            gpus: 1,
            pods: 1,
            status: &InferenceJobStatus::default(),
            now: &at(0),
            may_wait: false,
        });
        assert_eq!(placement, CachePlacement::FetchedByPod { why: None });
    }
}
