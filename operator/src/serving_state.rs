//! What served jobs add to the shared context: the caches of their Services and
//! PodDisruptionBudgets, and of groups' NetworkPolicies (filled by
//! [`crate::controller::served_watches`]), the served jobs that wait for room (woken with the
//! batch jobs that wait), and the replicas' backoff.
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::backoff::Backoff;
use crate::metrics::serving_gauges::ServingGauges;
use crate::stores::gpu_usage::pod_key;
use crate::stores::{JobRef, relist};

/// The served jobs' part of the context.
pub struct ServingState {
    /// The Services and PodDisruptionBudgets of served jobs.
    pub stores: ServingStores,
    /// How long failed replicas wait.
    pub backoff: Backoff,
    /// Replica pods this process deleted lately.
    pub deleting: Deleting,
    waiting: Arc<Waiting>,
    gauges: Arc<ServingGauges>,
    /// Per job uid, the InferencePool last applied (`serve.inferencePool`; no watch: written
    /// again when it changes, and once after a restart).
    pub pools: Arc<std::sync::Mutex<std::collections::HashMap<String, String>>>,
}

/// The caches of served jobs' Services and PodDisruptionBudgets (label `vramfit.io/job`).
#[derive(Clone)]
pub struct ServingStores {
    /// Services.
    pub services: Store<Service>,
    /// PodDisruptionBudgets.
    pub pdbs: Store<PodDisruptionBudget>,
    /// NetworkPolicies (of groups, `operator/src/group/`).
    pub network_policies: Store<NetworkPolicy>,
}

/// The writing side of [`ServingStores`] (the watches own it; tests write directly).
pub struct ServingWriters {
    /// Services.
    pub services: Writer<Service>,
    /// PodDisruptionBudgets.
    pub pdbs: Writer<PodDisruptionBudget>,
    /// NetworkPolicies.
    pub network_policies: Writer<NetworkPolicy>,
}

impl ServingWriters {
    /// Marks both stores listed with what they hold (as a first full list would).
    pub fn mark_ready(&mut self) {
        relist(&mut self.services);
        relist(&mut self.pdbs);
        relist(&mut self.network_policies);
    }
}

/// Replica pods this process deleted, for a while: the pod store may still show such a pod
/// without its deletion for a moment, and a reconcile in that moment must neither delete it
/// again nor take its GPUs for free. Pod names are never reused (their number grows), so an
/// entry that outlives its pod is harmless; entries expire after [`DELETING_TTL`].
#[derive(Default)]
pub struct Deleting(Mutex<HashMap<String, Instant>>);

/// How long a deletion is remembered.
pub const DELETING_TTL: Duration = Duration::from_secs(120);

impl Deleting {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Instant>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Remembers that pod `name` of `namespace` was deleted now.
    pub fn record(&self, namespace: &str, name: &str) {
        let mut entries = self.lock();
        entries.retain(|_, at| at.elapsed() < DELETING_TTL);
        entries.insert(pod_key(namespace, name), Instant::now());
    }

    /// Whether pod `name` of `namespace` was deleted by this process lately.
    pub fn contains(&self, namespace: &str, name: &str) -> bool {
        self.lock()
            .get(&pod_key(namespace, name))
            .is_some_and(|at| at.elapsed() < DELETING_TTL)
    }
}

/// Jobs woken when nodes, free GPUs or node caches change: served jobs with a replica waiting
/// for a class with room or for its model, batch jobs whose next attempt waits for its model.
#[derive(Default)]
pub struct Waiting(Mutex<HashSet<JobRef>>);

impl Waiting {
    fn lock(&self) -> MutexGuard<'_, HashSet<JobRef>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Marks `job` as waiting for room, or not.
    pub fn set(&self, job: JobRef, waits: bool) {
        if waits {
            self.lock().insert(job);
        } else {
            self.lock().remove(&job);
        }
    }

    /// The jobs that wait (to re-plan when nodes or free GPUs change).
    pub fn jobs(&self) -> Vec<JobRef> {
        self.lock().iter().cloned().collect()
    }
}

impl ServingState {
    /// A state whose stores are filled through the returned writers.
    pub fn writable() -> (Self, ServingWriters) {
        let services = Writer::<Service>::default();
        let pdbs = Writer::<PodDisruptionBudget>::default();
        let network_policies = Writer::<NetworkPolicy>::default();
        let state = Self {
            stores: ServingStores {
                services: services.as_reader(),
                pdbs: pdbs.as_reader(),
                network_policies: network_policies.as_reader(),
            },
            backoff: Backoff::default(),
            deleting: Deleting::default(),
            waiting: Arc::new(Waiting::default()),
            gauges: Arc::new(ServingGauges::default()),
            pools: Arc::default(),
        };
        (
            state,
            ServingWriters {
                services,
                pdbs,
                network_policies,
            },
        )
    }

    /// The Ready replicas by class, fed by the job watch, read by the gauge.
    pub fn gauges(&self) -> Arc<ServingGauges> {
        self.gauges.clone()
    }

    /// The served jobs waiting for room, shared with the wake-up stream.
    pub fn waiting(&self) -> Arc<Waiting> {
        self.waiting.clone()
    }

    /// The Service named `name` in `namespace`, as the store shows it.
    pub fn service(&self, namespace: &str, name: &str) -> Option<Arc<Service>> {
        self.stores
            .services
            .get(&ObjectRef::new(name).within(namespace))
    }

    /// The NetworkPolicy named `name` in `namespace`, as the store shows it.
    pub fn network_policy(&self, namespace: &str, name: &str) -> Option<Arc<NetworkPolicy>> {
        self.stores
            .network_policies
            .get(&ObjectRef::new(name).within(namespace))
    }

    /// The PodDisruptionBudget named `name` in `namespace`, as the store shows it.
    pub fn pdb(&self, namespace: &str, name: &str) -> Option<Arc<PodDisruptionBudget>> {
        self.stores
            .pdbs
            .get(&ObjectRef::new(name).within(namespace))
    }
}

impl ServingStores {
    /// Waits until every store has its first full list.
    pub async fn wait_until_ready(
        &self,
    ) -> Result<(), kube::runtime::reflector::store::WriterDropped> {
        self.services.wait_until_ready().await?;
        self.pdbs.wait_until_ready().await?;
        self.network_policies.wait_until_ready().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deletion_is_remembered_per_namespace_and_name() {
        let deleting = Deleting::default();
        deleting.record("ml", "chat-r0-1");
        assert!(deleting.contains("ml", "chat-r0-1"));
        assert!(!deleting.contains("ml", "chat-r0-2"));
        assert!(!deleting.contains("other", "chat-r0-1"));
    }
}
