//! An autoscaled job's replicas as the autoscaler counts them (caches and the load reader's
//! readings): each serving pod (a group's leader) with the concurrency planned for its class
//! and its last reading, and the Ready ones the load reader should read next.
use std::time::{Duration, Instant};

use kube::ResourceExt;
use vramfit_api::InferenceJob;
use vramfit_api::pod_keys::{CONCURRENCY_LABEL, GROUP_RANK_LABEL};

use crate::autoscaling::{Replica, ReplicaState};
use crate::context::Context;
use crate::stores::slim::SlimPod;

/// The job's replicas and the pods to read.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObservedLoad {
    /// Every serving pod not being deleted.
    pub replicas: Vec<Replica>,
    /// The Ready ones: uid and IP.
    pub ready: Vec<(String, String)>,
}

/// `job`'s replicas; a replica whose planned concurrency its pod does not say counts with
/// `fallback_capacity`, a reading older than `fresh` as none.
pub fn observe(
    job: &InferenceJob,
    ctx: &Context,
    fallback_capacity: u32,
    now: Instant,
    fresh: Duration,
) -> ObservedLoad {
    let (Some(uid), Some(namespace)) = (job.metadata.uid.as_deref(), job.namespace()) else {
        return ObservedLoad::default();
    };
    let mut observed = ObservedLoad::default();
    for pod in ctx.stores.job_pods.state() {
        if pod.metadata.namespace.as_deref() != Some(namespace.as_str())
            || !controlled_by(&pod, uid)
            || pod.metadata.deletion_timestamp.is_some()
            || ctx.serving.deleting.contains(&namespace, &pod.name_any())
            || !serves(&pod)
            || ended(&pod)
        {
            continue;
        }
        let capacity = pod
            .label(CONCURRENCY_LABEL)
            .and_then(|v| v.parse().ok())
            .unwrap_or(fallback_capacity)
            .max(1);
        let pod_uid = pod.metadata.uid.clone().unwrap_or_default();
        let state = match (is_ready(&pod), pod_ip(&pod)) {
            (true, Some(ip)) => {
                observed.ready.push((pod_uid.clone(), ip));
                match ctx.scaling.reading(&pod_uid, now, fresh) {
                    Some(reading) => match reading.result {
                        Ok(reading) => ReplicaState::Read(reading),
                        Err(_) => ReplicaState::Unread,
                    },
                    None => ReplicaState::Unread,
                }
            }
            _ => ReplicaState::Starting,
        };
        observed.replicas.push(Replica { capacity, state });
    }
    observed
}

fn controlled_by(pod: &SlimPod, uid: &str) -> bool {
    pod.owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == uid)
}

/// A pod that serves: one of one-pod replicas, or a group's leader (rank 0).
fn serves(pod: &SlimPod) -> bool {
    pod.label(GROUP_RANK_LABEL).is_none_or(|rank| rank == "0")
}

fn ended(pod: &SlimPod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn is_ready(pod: &SlimPod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

fn pod_ip(pod: &SlimPod) -> Option<String> {
    pod.status
        .as_ref()?
        .pod_ip
        .clone()
        .filter(|ip| !ip.is_empty())
}
