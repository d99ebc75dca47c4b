//! The node model cache's hook into a served job's decision (`--model-cache`; the logic is in
//! [`crate::model_cache`]): where a new replica pod's weights come from, the pod's mount and
//! volumes, replicas that wait for a node to download their model, and each replica's
//! `weights` status.
use k8s_openapi::api::core::v1::Pod;
use vramfit_api::pod_keys::replica_pod_name;
use vramfit_api::{Plan, ReplicaStatus};
use vramfit_planner::NodeClass;

use super::decide::Draft;
use crate::model_cache::group_placement::{GroupAsk, decide_pods};
use crate::model_cache::placement::{CacheAsk, CachePlacement, wait_started};
use crate::model_cache::{WAIT_REQUEUE, WAITING_REASON, mount, weights};

/// A replica that waits for its model: the class chosen and the line's message.
#[derive(Clone, Debug)]
pub(super) struct ModelWait {
    pub(super) class: String,
    pub(super) message: String,
}

/// A new replica (slot `slot`) that waits for its model: no pod yet, `pod_name` the next one.
pub(super) fn waiting_line(slot: u32, pod_name: String, wait: ModelWait) -> ReplicaStatus {
    let mut line = ReplicaStatus {
        slot,
        updated: true,
        ..ReplicaStatus::default()
    };
    mark_waiting(&mut line, pod_name, wait);
    line
}

/// Replica `line` waits for its model (no pod while a node downloads it): `pod_name` is the
/// name its pod will have.
pub(super) fn mark_waiting(line: &mut ReplicaStatus, pod_name: String, wait: ModelWait) {
    line.pod_name = pod_name;
    line.node_class = wait.class;
    line.node_name = None;
    line.ready = false;
    line.reason = Some(WAITING_REASON.to_string());
    line.message = Some(wait.message);
}

impl<'a> Draft<'a> {
    /// The job's model and the caches, when the job uses the cache.
    pub(super) fn cache_ask(&self) -> Option<CacheAsk<'a>> {
        self.obs.model_cache.and_then(|view| view.ask())
    }

    /// Where the weights of slot `slot`'s next pod on `class` come from; `None` when the job
    /// does not use the cache. A replica whose plan spans nodes is a group of `plan.nodes()`
    /// pods: all of them mount (as many nodes with room hold the model) or none does, as for
    /// a batch group. A replica may wait only when it has no live pod (a new one, or one
    /// whose pod ended or never came): a surge or in-place pod never waits.
    pub(super) fn cache_placement(
        &self,
        slot: u32,
        plan: &Plan,
        class: &NodeClass,
    ) -> Option<CachePlacement> {
        let ask = self.cache_ask()?;
        let line = self.lines.iter().find(|l| l.slot == slot);
        let may_wait = line.is_none_or(|l| l.reason.is_some() && l.surge.is_none());
        let waited_since = line
            .filter(|l| l.reason.as_deref() == Some(WAITING_REASON))
            .and_then(|l| wait_started(l.message.as_deref()));
        Some(decide_pods(&GroupAsk {
            ask,
            class: &class.name,
            gpus: plan.gpu_count,
            pods: plan.nodes(),
            waited_since,
            now: self.now(),
            may_wait,
        }))
    }

    /// Makes `pod` take its weights as `placement` says ([`mount::attach`]); the volume it
    /// mounts is created before it. A replica that is a group has every member built from
    /// `pod` (`group::served`), the mount with it.
    pub(super) fn attach_cache(&mut self, pod: &mut Pod, placement: Option<CachePlacement>) {
        let Some(ask) = self.cache_ask() else {
            return;
        };
        let root = &ask.view.settings.root;
        if let Some(volume) = mount::attach(pod, self.obs.job, ask.model, root, placement) {
            self.volumes.push(volume);
        }
    }

    /// Slot `slot` waits for its model (no pod): the line says so.
    pub(super) fn wait_line(&self, slot: u32) -> Option<(String, ModelWait)> {
        let wait = self.model_wait.clone()?;
        let number = self.status.attempt_count.saturating_add(1);
        Some((replica_pod_name(&self.job_name(), slot, number), wait))
    }

    /// Each replica's `weights` (from its pod, the one this decision creates or the one the
    /// stores show; why a pod fetches the model itself among them; a replica that is a group
    /// is seen as one pod with its leader's annotations: the leader's weights), the replicas
    /// waiting for their model counted, and a look again soon while any waits.
    pub(super) fn cache_status(&mut self) {
        if self.obs.model_cache.is_none() {
            return;
        }
        let mut waiting = 0u32;
        for index in 0..self.lines.len() {
            if self.lines[index].reason.as_deref() == Some(WAITING_REASON) {
                waiting += 1;
                self.lines[index].weights = None;
                continue;
            }
            if let Some(pod) = self.line_pod(index) {
                self.lines[index].weights = Some(weights::of_pod(&pod));
            }
        }
        self.status.replicas_waiting_for_model = (waiting > 0).then_some(waiting);
        if waiting > 0 {
            self.wake(Some(WAIT_REQUEUE));
        }
    }
}
