//! Observe (reads the caches, writes nothing): the job, the pods the stores show for it, the
//! pods this process created that no store shows yet, and the room in every class.
pub use crate::error::ObserveError;
pub mod replica_load;
pub mod served;

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use tracing::debug;
use vramfit_api::{InferenceJob, Phase};
use vramfit_planner::{JobInput, SpecError, resolve_job};

use crate::capacity::{Capacity, Inventory, PodConstraints};
use crate::context::Context;
use crate::pod::PodSeen;
use crate::stores::gpu_usage::pod_key;
use crate::stores::is_finished;

/// How soon a job read from a cache that lags behind vramfit's own status write is looked at
/// again (its watch event normally triggers the reconcile first).
const STALE_CACHE_RETRY: Duration = Duration::from_millis(500);

/// What the caches show of one job, at one moment.
pub struct Snapshot<'a> {
    job: &'a InferenceJob,
    ctx: &'a Context,
    namespace: String,
    input: Result<JobInput, SpecError>,
    inventory: Arc<Inventory>,
    /// The job's pods this snapshot saw counted by the GPU watch or finished: their
    /// reservations can go (see [`Snapshot::settled_pods`]).
    settled: RefCell<Vec<String>>,
}

/// `Some(action)` when the job needs nothing now: the cached copy predates vramfit's own last
/// status write (deciding on it would repeat that decision's events), the job is finished
/// (final), or it is being deleted (the garbage collector removes its pods).
pub fn nothing_to_do(job: &InferenceJob, ctx: &Context) -> Option<Action> {
    if let (Some(uid), Some(version)) = (&job.metadata.uid, &job.metadata.resource_version)
        && ctx.is_stale(uid, version)
    {
        debug!("the cache has not caught up with the last status write yet");
        return Some(Action::requeue(STALE_CACHE_RETRY));
    }
    let finished = job
        .status
        .as_ref()
        .and_then(|s| s.phase)
        .is_some_and(Phase::is_terminal);
    (finished || job.metadata.deletion_timestamp.is_some()).then(Action::await_change)
}

/// The job as the caches show it.
pub fn snapshot<'a>(job: &'a InferenceJob, ctx: &'a Context) -> Result<Snapshot<'a>, ObserveError> {
    let namespace = job
        .namespace()
        .ok_or(ObserveError::MissingObjectKey("metadata.namespace"))?;
    Ok(Snapshot {
        job,
        ctx,
        namespace,
        input: resolve_job(&job.spec).map(|mut input| {
            // `serve.adapters`: planned with the list accepted for this reconcile.
            crate::served_adapters::attach(&mut input, job);
            input
        }),
        inventory: ctx.inventory(),
        settled: RefCell::new(Vec::new()),
    })
}

impl Snapshot<'_> {
    /// What the stores say of pod `name` of this job.
    pub fn pod(&self, name: &str) -> PodSeen {
        if let Some(pod) = self.ctx.stores.job_pod(&self.namespace, name) {
            if !controlled_by(&pod, self.job) {
                return PodSeen::Foreign;
            }
            let finished = is_finished(pod.status.as_ref().and_then(|s| s.phase.as_deref()));
            let counted = || {
                let key = pod_key(&self.namespace, name);
                self.ctx.stores.usage().contains(&key)
            };
            let mut settled = self.settled.borrow_mut();
            if (finished || counted()) && !settled.iter().any(|s| s == name) {
                settled.push(name.to_string());
            }
            return PodSeen::Observed(pod);
        }
        match self.ctx.reservations.get(&self.namespace, name) {
            Some(reservation)
                if Some(reservation.job_uid.as_str()) == self.job.metadata.uid.as_deref() =>
            {
                PodSeen::Applied(reservation.plan)
            }
            // Applied moments ago for an earlier job of the same name: not this job's.
            Some(_) => PodSeen::Foreign,
            None => PodSeen::Absent,
        }
    }

    /// The job.
    pub fn job(&self) -> &InferenceJob {
        self.job
    }

    /// The job's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The validated spec, or why it is invalid.
    pub fn input(&self) -> &Result<JobInput, SpecError> {
        &self.input
    }

    /// The classes and nodes this snapshot plans with.
    pub fn inventory(&self) -> &Inventory {
        &self.inventory
    }

    /// The job's pods this snapshot saw settled: the GPU watch counts them, or they finished
    /// (and take no GPUs). Their reservations end; the apply step forgets them. Otherwise a pod
    /// deleted before any placement looked at the ledger would still count against its class
    /// until its reservation expired (and nothing wakes the jobs waiting for room then).
    pub fn settled_pods(&self) -> Vec<String> {
        self.settled.borrow().clone()
    }

    /// Free GPUs per class for this job's pods, after every reservation.
    pub fn capacity(&self) -> Capacity {
        self.capacity_without(&[])
    }

    /// [`Snapshot::capacity`] with the GPUs of the pods named in `leaving` (this job's pods
    /// about to be deleted) free again: a group that ends is deleted in the same reconcile
    /// that places the next one.
    pub fn capacity_without(&self, leaving: &[String]) -> Capacity {
        let stores = &self.ctx.stores;
        let all = stores.usage();
        let freed;
        let usage = if leaving.is_empty() {
            &*all
        } else {
            let mut less = all.clone();
            for pod in leaving {
                less.remove(&pod_key(&self.namespace, pod));
            }
            freed = less;
            &freed
        };
        // A pod a store shows is no longer a reservation: the GPU watch counts it, or it
        // finished and takes no GPUs.
        let reserved = self
            .ctx
            .reservations
            .pending(|key| all.contains(key) || stores.job_pod_finished(key));
        Capacity::compute(
            &self.inventory,
            usage,
            &reserved,
            &PodConstraints::of_job(self.job),
            &|owner| stores.is_job_of(owner),
        )
        .with_group_spread(self.ctx.settings.group_spread)
    }

    /// What the job's placement sees of the node model caches, when it uses them.
    pub fn model_cache(&self, now: &Time) -> Option<crate::model_cache::view::CacheView> {
        crate::model_cache::view::observe(self.ctx, self.job, &self.inventory, now)
    }
}

/// Whether `job` (this very object, by uid) is the pod's controller: a job deleted and
/// created again under the same name must not adopt its predecessor's pods.
pub fn controlled_by(pod: &Pod, job: &InferenceJob) -> bool {
    pod.owner_references().iter().any(|owner| {
        owner.controller == Some(true) && Some(&owner.uid) == job.metadata.uid.as_ref()
    })
}
