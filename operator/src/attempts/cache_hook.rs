//! The node model cache's hook into a batch attempt's decision (`--model-cache`; the logic is
//! in [`crate::model_cache`]): among equal-rank plans a class holding the model is preferred,
//! a new attempt's pod mounts the model, waits for a node to download it (no pod yet), or
//! fetches it itself; the job's `weights` status and its `replicasWaitingForModel` count. A
//! group attempt comes here too (the batch machine sees the group as one pod, whose plan
//! names the group's N nodes): each of its pods is built from the one pod marked here.
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use vramfit_api::conditions::{self, ConditionType, Reason};
use vramfit_api::{ClassRejection, Fallback, Phase, Plan};
use vramfit_planner::JobInput;

use super::{Draft, PodSeen};
use crate::capacity::Capacity;
use crate::model_cache::attempt_placement::{AttemptAsk, decide_attempt};
use crate::model_cache::job_model::job_model;
use crate::model_cache::placement::{CacheAsk, CachePlacement, prefer_cached_class};
use crate::model_cache::{WAIT_REQUEUE, WAITING_REASON, mount, weights};
use crate::placement::Choice;

impl<'a> Draft<'a> {
    /// The job's model and the caches, when the job uses the cache.
    fn cache_ask(&self) -> Option<CacheAsk<'a>> {
        self.obs.model_cache.get().and_then(|view| view.ask())
    }

    /// `choice`, or a class whose plan ranks equal and whose nodes hold the model (never a
    /// worse plan, never a class the attempt may not use).
    pub(super) fn prefer_cached(
        &self,
        input: &JobInput,
        capacity: &Capacity,
        fallback: &Fallback,
        excluded: &[ClassRejection],
        choice: Choice,
    ) -> Choice {
        let Some(ask) = self.cache_ask() else {
            return choice;
        };
        let restricted;
        let job = if excluded.is_empty() {
            input
        } else {
            let mut job = input.clone();
            job.classes
                .denied
                .extend(excluded.iter().map(|e| e.node_class.clone()));
            restricted = job;
            &restricted
        };
        let Choice {
            plan,
            class,
            passed_over,
        } = choice;
        let inventory = self.obs.inventory;
        let (plan, class) =
            prefer_cached_class(job, inventory, capacity, fallback, (plan, class), ask);
        Choice {
            plan,
            class,
            passed_over,
        }
    }

    /// Makes the attempt's `pod` take its weights from the cache as the caches allow; `false`
    /// when a new attempt (`may_wait`) waits for a node to download the model instead: no pod,
    /// and the status says what it waits for.
    pub(super) fn attach_cache(&mut self, pod: &mut Pod, plan: &Plan, may_wait: bool) -> bool {
        let Some(ask) = self.cache_ask() else {
            return true;
        };
        let placement = decide_attempt(&AttemptAsk {
            ask,
            class: &plan.node_class,
            gpus: plan.gpu_count,
            pods: plan.nodes(),
            status: &self.status,
            now: &self.obs.now,
            may_wait,
        });
        if let CachePlacement::Wait { message } = placement {
            self.wait_for_model(&plan.node_class, message);
            return false;
        }
        let root = &ask.view.settings.root;
        let volume = mount::attach(pod, self.obs.job, ask.model, root, Some(placement));
        self.volumes.extend(volume);
        true
    }

    /// `desired`, the metadata-only apply of the running one-pod attempt `pod`, without its
    /// spec when `pod` mounts a cached model ([`mount::metadata_apply`]). A group's pods (a
    /// group of one too) are built from `desired` first and trimmed after
    /// (`group::cache_hook`).
    pub(super) fn as_running(&self, desired: Pod, pod: &Pod) -> Pod {
        if crate::pod::runs_groups(self.obs.job) {
            return desired;
        }
        mount::metadata_apply(desired, pod)
    }

    /// The next attempt waits on `class` for its model: Pending, no pod, `Scheduled=False`
    /// (`WaitingForModel`, the message ending " since <time>"), the class named (the cache
    /// sync asks its nodes for the model), and a look again soon.
    fn wait_for_model(&mut self, class: &str, message: String) {
        let number = self.status.attempt_count.saturating_add(1);
        self.status.phase = Some(Phase::Pending);
        self.status.node_class = Some(class.to_string());
        self.set(
            ConditionType::Scheduled,
            false,
            Reason::WaitingForModel,
            format!("attempt {number} on class {class}: {message}"),
        );
        self.set(
            ConditionType::Ready,
            false,
            Reason::NotRunning,
            "no pod runs: the next attempt waits for its model",
        );
        // The requeue adds one second to a wake-up.
        let wake = WAIT_REQUEUE.saturating_sub(Duration::from_secs(1));
        self.wake_in = Some(self.wake_in.map_or(wake, |w| w.min(wake)));
    }

    /// `replicasWaitingForModel` (1 while the next attempt waits) and the current attempt's
    /// `weights`, read from its pod (the one this decision creates, or the one the stores
    /// show) when the pod says where its weights come from: made with the cache on.
    pub(super) fn cache_status(&mut self) {
        let waiting = conditions::get(&self.status.conditions, ConditionType::Scheduled)
            .is_some_and(|c| c.status == "False" && c.reason == WAITING_REASON);
        self.status.replicas_waiting_for_model = waiting.then_some(1);
        if waiting || job_model(self.obs.job).is_none() {
            self.status.weights = None;
            return;
        }
        let created = self.apply_pod.as_ref().filter(|_| self.create_pod);
        if let Some(pod) = created {
            self.status.weights = weights::of_marked_pod(pod);
            return;
        }
        let Some(name) = self.status.pod_name.clone() else {
            return;
        };
        if let PodSeen::Observed(pod) = (self.obs.pods)(&name) {
            self.status.weights = weights::of_marked_pod(&pod);
        }
    }
}
