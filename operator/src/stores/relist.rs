//! Triggers that survive a relist.
//!
//! After a watch error (a `410 Expired` once the API server comes back, say) kube's watcher lists
//! again: `Init`, one `InitApply` per object, `InitDone`. Its store keeps serving the *old* state
//! until `InitDone` and swaps the new list in only then. A reconcile triggered by an `InitApply`
//! therefore reads what the store held before the outage, finds nothing to do, and nothing
//! triggers another: a job whose pod ended while the watch was away stayed Running. So both
//! trigger sources here hold their triggers until `InitDone`.
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::{Stream, StreamExt, stream};
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use crate::stores::slim::SlimPod;
use crate::stores::{PodOwner, pod_owner};

/// The Controller's trigger stream from its reflector's events (after the store applied them):
/// each applied object at once, and every object in the store once a (re)list is complete —
/// never an `InitApply`, which the store does not show yet.
pub fn applied_after_relist<K>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    store: Store<K>,
) -> impl Stream<Item = Result<K, watcher::Error>>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash,
{
    events
        .flat_map(move |event| {
            let objects: Vec<Result<Arc<K>, watcher::Error>> = match event {
                Ok(watcher::Event::Apply(object)) => vec![Ok(Arc::new(object))],
                Ok(watcher::Event::InitDone) => store.state().into_iter().map(Ok).collect(),
                Ok(_) => Vec::new(),
                Err(error) => vec![Err(error)],
            };
            stream::iter(objects)
        })
        // The store's objects are cloned one at a time, as the Controller takes them.
        .map(|object| object.map(Arc::unwrap_or_clone))
}

/// A pod as the store held it: its resource version and the job its owner reference names.
type SeenPod = (Option<String>, Option<PodOwner>);

/// A change of a pod whose controller owner reference names an InferenceJob: what may trigger
/// that job's reconcile (whether the pod is the job's is decided against the job store:
/// `controller::jobs_to_reconcile`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PodChange {
    /// The job the reference names, with the uid it names.
    pub owner: PodOwner,
    /// The pod is gone.
    pub gone: bool,
}

fn changes(owner: Option<PodOwner>, gone: bool) -> Option<PodChange> {
    owner.map(|owner| PodChange { owner, gone })
}

/// Which jobs to reconcile as the job-pod store takes in its watch events.
#[derive(Default)]
pub struct ChangedPodOwners {
    /// During a relist: the pods the store held when it began (resource version, owning job),
    /// less those the new list has shown so far.
    before_relist: Option<HashMap<ObjectRef<SlimPod>, SeenPod>>,
    /// During a relist: jobs whose pod changed, to reconcile once the store holds the new list.
    changed: HashSet<PodChange>,
}

impl ChangedPodOwners {
    /// Takes one event, after `store` applied it; returns the jobs to reconcile now.
    pub fn observe(
        &mut self,
        event: &watcher::Event<SlimPod>,
        store: &Store<SlimPod>,
    ) -> Vec<PodChange> {
        match event {
            watcher::Event::Apply(pod) => changes(pod_owner(pod), false).into_iter().collect(),
            watcher::Event::Delete(pod) => changes(pod_owner(pod), true).into_iter().collect(),
            watcher::Event::Init => {
                let before = store
                    .state()
                    .iter()
                    .map(|pod| {
                        let version = pod.metadata.resource_version.clone();
                        (ObjectRef::from_obj(&**pod), (version, pod_owner(&**pod)))
                    })
                    .collect();
                self.before_relist = Some(before);
                self.changed.clear();
                Vec::new()
            }
            watcher::Event::InitApply(pod) => {
                let before = self
                    .before_relist
                    .as_mut()
                    .and_then(|before| before.remove(&ObjectRef::from_obj(pod)));
                let unchanged = before.is_some_and(|(version, _)| {
                    version.is_some() && version == pod.metadata.resource_version
                });
                if !unchanged {
                    self.changed.extend(changes(pod_owner(pod), false));
                }
                Vec::new()
            }
            watcher::Event::InitDone => {
                // Pods the new list no longer has were deleted while the watch was away.
                let gone = self.before_relist.take().unwrap_or_default();
                self.changed.extend(
                    gone.into_values()
                        .filter_map(|(_, owner)| changes(owner, true)),
                );
                self.changed.drain().collect()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use crate::stores::JobRef;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use kube::runtime::reflector;

    fn job_pod(job: &str, attempt: u32, version: &str, pod: fn(&str, &str) -> Pod) -> SlimPod {
        let mut pod = pod(&format!("{job}-{attempt}"), "a-1");
        pod.metadata.namespace = Some("team-a".into());
        pod.metadata.resource_version = Some(version.into());
        pod.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "vramfit.io/v1alpha1".into(),
            kind: "InferenceJob".into(),
            name: job.into(),
            uid: "u".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]);
        SlimPod::of(&pod)
    }

    fn job(name: &str) -> JobRef {
        JobRef::new(name).within("team-a")
    }

    /// Feeds `events` through a store and the tracker; returns what each event triggered.
    fn triggers(
        writer: &mut reflector::store::Writer<SlimPod>,
        owners: &mut ChangedPodOwners,
        events: Vec<watcher::Event<SlimPod>>,
    ) -> Vec<Vec<JobRef>> {
        let store = writer.as_reader();
        events
            .into_iter()
            .map(|event| {
                writer.apply_watcher_event(&event);
                let mut jobs: Vec<JobRef> = owners
                    .observe(&event, &store)
                    .into_iter()
                    .map(|change| change.owner.job)
                    .collect();
                jobs.sort_by(|a, b| a.name.cmp(&b.name));
                jobs
            })
            .collect()
    }

    #[test]
    fn a_relist_triggers_the_jobs_whose_pods_changed_once_the_store_holds_them() {
        let (_, mut writer) = reflector::store::<SlimPod>();
        let mut owners = ChangedPodOwners::default();
        let running = |job, version| job_pod(job, 1, version, fixtures::running_pod);
        let first_list = vec![
            watcher::Event::Init,
            watcher::Event::InitApply(running("ends", "10")),
            watcher::Event::InitApply(running("steady", "11")),
            watcher::Event::InitApply(running("deleted", "12")),
            watcher::Event::InitDone,
        ];
        let seen = triggers(&mut writer, &mut owners, first_list);
        assert_eq!(seen[4], [job("deleted"), job("ends"), job("steady")]);

        // While the watch was away: `ends` finished, `deleted`'s pod went, `steady` did not change.
        let ended = job_pod("ends", 1, "20", fixtures::succeeded_pod);
        let relist = vec![
            watcher::Event::Init,
            watcher::Event::InitApply(ended.clone()),
            watcher::Event::InitApply(running("steady", "11")),
            watcher::Event::InitDone,
        ];
        let store = writer.as_reader();
        let mut relisted = Vec::new();
        for event in relist {
            writer.apply_watcher_event(&event);
            let jobs = owners.observe(&event, &store);
            if !matches!(event, watcher::Event::InitDone) {
                assert!(
                    jobs.is_empty(),
                    "nothing before the store holds the new list"
                );
                continue;
            }
            // The reconcile these trigger reads the ended pod.
            let now = store.get(&ObjectRef::from_obj(&ended)).unwrap();
            assert_eq!(now.metadata.resource_version.as_deref(), Some("20"));
            relisted = jobs;
        }
        relisted.sort_by(|a, b| a.owner.job.name.cmp(&b.owner.job.name));
        let gone: Vec<(JobRef, bool)> = relisted
            .into_iter()
            .map(|change| (change.owner.job, change.gone))
            .collect();
        assert_eq!(
            gone,
            [(job("deleted"), true), (job("ends"), false)],
            "a pod the relist no longer shows went"
        );
    }

    #[test]
    fn watch_events_trigger_their_job_at_once() {
        let (_, mut writer) = reflector::store::<SlimPod>();
        let mut owners = ChangedPodOwners::default();
        let pod = job_pod("chat", 2, "5", fixtures::running_pod);
        let seen = triggers(
            &mut writer,
            &mut owners,
            vec![
                watcher::Event::Apply(pod.clone()),
                watcher::Event::Delete(pod),
            ],
        );
        assert_eq!(seen, [vec![job("chat")], vec![job("chat")]]);
    }

    #[tokio::test]
    async fn the_controller_is_triggered_by_applies_and_by_the_whole_store_after_a_list() {
        let (store, mut writer) = reflector::store::<Pod>();
        let pod = |name: &str| fixtures::running_pod(name, "a-1");
        let events = vec![
            watcher::Event::Init,
            watcher::Event::InitApply(pod("a")),
            watcher::Event::InitApply(pod("b")),
            watcher::Event::InitDone,
            watcher::Event::Apply(pod("c")),
            watcher::Event::Delete(pod("a")),
        ];
        let applied = stream::iter(events).map(move |event| {
            writer.apply_watcher_event(&event);
            Ok(event)
        });
        let mut names: Vec<String> = applied_after_relist(applied, store)
            .map(|pod| pod.unwrap().metadata.name.unwrap())
            .collect()
            .await;
        names[..2].sort();
        assert_eq!(names, ["a", "b", "c"]);
    }
}
