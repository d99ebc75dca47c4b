//! The controller's wiring: reflectors for the stores reconcile reads, and the kube-runtime
//! `Controller` on InferenceJobs.
//!
//! Watches, one stream per purpose:
//!
//! | what | selector | why |
//! |---|---|---|
//! | InferenceJobs | all | the controller's own objects (`DeserializeGuard`: a job that does not deserialize is reported, not fatal), without managed fields |
//! | Pods (store) | `vramfit.io/job` | the attempts' pods, every phase, as [`SlimPod`]s: what reconcile observes; each change reconciles the job that controls the pod, once the store holds it |
//! | Pods (GPU usage) | `status.phase!=Succeeded,status.phase!=Failed` | GPUs taken per node, summed event by event (no pod kept; read as [`SlimPod`]s) |
//! | Nodes (store) | all | classes and allocatable GPUs, trimmed of images and managed fields |
//! | GpuNodeClasses (store) | all | class overrides and definitions (`DeserializeGuard`) |
//!
//! Re-planning triggers come from the stores' own streams, after the store is updated: a
//! node's labels, allocatable GPUs, taints, cordon or readiness changing, any GpuNodeClass
//! change, or GPUs freed on a node, wake a (coalesced, 1 s) re-queue of the jobs that wait
//! for a class with room (Pending, Unschedulable); placed jobs follow their pods. (`Controller::watches` and
//! `.owns()` would open a second watch whose event can arrive before the store has the
//! change: the reconcile would read the old state and nothing would trigger another.)
//!
//! Every watch lists in pages of [`LIST_PAGE`] and retries with kube's default backoff, except
//! that `410 Expired` lists again at once ([`crate::watch_retry`]); its errors are logged and it
//! resumes.
//! A relist (after `410 Expired`, e.g. once the API server is back) triggers
//! reconciles only when the store holds the whole new list: see [`crate::relist`].
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::channel::mpsc::UnboundedSender;
use futures::{FutureExt, Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus, Pod};
use kube::api::Api;
use kube::core::DeserializeGuard;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use tokio::sync::{Notify, watch};
use tracing::{debug, info, warn};
use vramfit_api::labels::is_gpu_resource;
use vramfit_api::{GpuNodeClass, InferenceJob};

use crate::context::{Context, Settings, StoreWriters, Stores};
use crate::desired_pod::{JOB_LABEL, fnv1a64};
use crate::health::Health;
use crate::metrics::Metrics;
use crate::node_classes::{GpuResources, is_schedulable, pod_gpu_request};
use crate::reconcile::{error_policy, reconcile};
use crate::relist::{ChangedPodOwners, applied_after_relist};
use crate::slim::{SlimJob, SlimPod, full_job_event};
use crate::watch_retry::{relist_expired_at_once, with_backoff};

/// Field selector of the GPU accounting pod store.
pub const NON_TERMINAL_PODS: &str = "status.phase!=Succeeded,status.phase!=Failed";

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// Reconciles at once.
    pub concurrency: u16,
    /// Reporting instance of events (the pod name).
    pub instance: Option<String>,
    /// Tunables.
    pub settings: Settings,
    /// Window in which store changes are coalesced into one re-queue of the waiting jobs.
    pub wake_coalesce: Duration,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            concurrency: 16,
            instance: None,
            settings: Settings::default(),
            wake_coalesce: Duration::from_secs(1),
        }
    }
}

/// Runs the controller until `stop` turns true and in-flight reconciles finish.
pub async fn run(
    client: Client,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    config: ControllerConfig,
    stop: watch::Receiver<bool>,
) {
    let (stores, writers) = Stores::writable();
    let wake = Arc::new(Notify::new());
    // Pod changes reach their job through the job-pod store's own stream, after the store
    // holds them: a separate `.owns()` watch could trigger a reconcile that reads the store
    // before the change arrives there, and then nothing would trigger another.
    let (pod_changes, changed_jobs) = futures::channel::mpsc::unbounded();
    let reflectors = tokio::spawn(drive_reflectors(
        client.clone(),
        writers,
        wake.clone(),
        pod_changes,
    ));

    // The job reflector is ours, not the Controller's: its first full list (`InitDone`) is
    // the readiness signal. A second waiter on the Controller's store would not do: kube's
    // `Store::wait_until_ready` wakes only its latest poller, so either that waiter or the
    // Controller's own runner would never wake.
    let (job_store, job_writer) = reflector::store::<DeserializeGuard<InferenceJob>>();
    let ready_health = health.clone();
    let job_events = reflector(
        job_writer,
        // The Controller backs its trigger stream off after an error.
        relist_expired_at_once(
            "inferencejobs",
            watcher(
                Api::<DeserializeGuard<SlimJob>>::all(client.clone()),
                list_config(),
            ),
        )
        .map_ok(full_job_event)
        .modify(trim_job),
    )
    .inspect(move |event| {
        if matches!(event, Ok(watcher::Event::InitDone)) {
            ready_health.set_synced(true);
        }
    });
    let controller = Controller::for_stream(
        applied_after_relist(job_events, job_store.clone()),
        job_store.clone(),
    );
    let ctx = Arc::new(Context::new(
        client.clone(),
        metrics.clone(),
        stores.clone(),
        config.settings.clone(),
        config.instance.clone(),
    ));
    health.set_gauge_source(gauge_source(job_store.clone(), ctx.clone()));

    // Reconciling before the stores have listed would see no nodes and park every job.
    info!("waiting for the node, pod and GpuNodeClass caches");
    let mut waiting = stop.clone();
    tokio::select! {
        synced = stores.wait_until_ready() => if synced.is_err() {
            warn!("a store's reflector ended before it synced");
            reflectors.abort();
            return;
        },
        _ = waiting.wait_for(|stopped| *stopped) => {
            reflectors.abort();
            return;
        }
    }
    info!("caches synced; starting the controller (ready once the jobs are listed)");

    controller
        .reconcile_on(changed_jobs)
        .reconcile_on(waiting_jobs_on(
            wake_stream(wake, config.wake_coalesce),
            job_store.clone(),
        ))
        .with_config(controller::Config::default().concurrency(config.concurrency))
        .graceful_shutdown_on(shutdown_future(stop))
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((job, _)) => debug!(job = %job, "reconciled"),
                Err(controller::Error::ObjectNotFound(job)) => {
                    debug!(job = %job, "job gone before its reconcile")
                }
                Err(controller::Error::ReconcilerFailed(..)) => {} // logged by error_policy
                Err(error) => warn!(%error, "controller"),
            }
        })
        .await;
    health.set_synced(false);
    reflectors.abort();
    info!("controller stopped");
}

/// A `Send + Sync` future that resolves once `stop` turns true (what
/// `graceful_shutdown_on` takes).
fn shutdown_future(
    mut stop: watch::Receiver<bool>,
) -> impl Future<Output = ()> + Send + Sync + 'static {
    let (tx, rx) = futures::channel::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = stop.wait_for(|stopped| *stopped).await;
        let _ = tx.send(());
    });
    rx.map(|_| ())
}

/// The function `/metrics` calls to refresh the job and inventory gauges.
fn gauge_source(
    job_store: Store<DeserializeGuard<InferenceJob>>,
    ctx: Arc<Context>,
) -> Box<dyn Fn() + Send + Sync> {
    Box::new(move || {
        let jobs = job_store.state();
        ctx.metrics
            .observe_jobs(jobs.iter().map(|job| match &job.0 {
                Ok(job) => {
                    let status = job.status.as_ref();
                    (
                        status
                            .and_then(|s| s.phase)
                            .unwrap_or(vramfit_api::Phase::Pending),
                        status.and_then(|s| s.node_class.as_deref()),
                    )
                }
                Err(_) => (vramfit_api::Phase::Pending, None),
            }));
        ctx.metrics
            .observe_inventory(ctx.inventory().gpu_inventory());
    })
}

/// For each wake-up, the jobs a change of nodes, classes or free GPUs can move: those not
/// placed yet (Pending, Unschedulable). Placed and finished jobs follow their pods instead.
pub fn waiting_jobs_on(
    wakes: impl Stream<Item = ()> + Send + 'static,
    jobs: Store<DeserializeGuard<InferenceJob>>,
) -> impl Stream<Item = JobRef> + Send + 'static {
    wakes.flat_map(move |()| futures::stream::iter(waiting_jobs(&jobs.state())))
}

/// The jobs of `jobs` that wait for a class with room (or have not been planned yet).
pub fn waiting_jobs(jobs: &[Arc<DeserializeGuard<InferenceJob>>]) -> Vec<JobRef> {
    jobs.iter()
        .filter(|job| match &job.0 {
            Ok(job) => matches!(
                job.status.as_ref().and_then(|s| s.phase),
                None | Some(vramfit_api::Phase::Pending | vramfit_api::Phase::Unschedulable)
            ),
            Err(_) => false,
        })
        .map(|job| JobRef::from_obj(job.as_ref()))
        .collect()
}

/// A stream that yields once per burst of wake-ups, `coalesce` after its first.
pub fn wake_stream(
    wake: Arc<Notify>,
    coalesce: Duration,
) -> impl Stream<Item = ()> + Send + 'static {
    futures::stream::unfold(wake, move |wake| async move {
        wake.notified().await;
        tokio::time::sleep(coalesce).await;
        Some(((), wake))
    })
}

/// A job whose pod changed, to reconcile.
pub type JobRef = ObjectRef<DeserializeGuard<InferenceJob>>;

/// Runs the four reflectors that fill the stores; returns only if all of them end. Each job
/// pod's change is sent on `pod_changes` (as its job) once the store holds it (after a relist:
/// once the whole new list is in, see [`crate::relist`]).
pub async fn drive_reflectors(
    client: Client,
    writers: StoreWriters,
    wake: Arc<Notify>,
    pod_changes: UnboundedSender<JobRef>,
) {
    let StoreWriters {
        nodes,
        job_pods,
        gpu_usage,
        node_classes,
        inventory_version,
    } = writers;

    let node_wake = wake.clone();
    let node_version = inventory_version.clone();
    let mut fingerprints: HashMap<String, u64> = HashMap::new();
    let nodes = with_backoff(
        "nodes",
        watcher(Api::<Node>::all(client.clone()), list_config()),
    )
    .modify(trim_node)
    .reflect(nodes)
    .for_each(move |event| {
        match event {
            Ok(watcher::Event::Apply(node)) => {
                let fingerprint = node_fingerprint(&node);
                if fingerprints.insert(node.name_any(), fingerprint) != Some(fingerprint) {
                    node_version.fetch_add(1, Ordering::AcqRel);
                    node_wake.notify_one();
                }
            }
            Ok(watcher::Event::InitApply(node)) => {
                fingerprints.insert(node.name_any(), node_fingerprint(&node));
            }
            Ok(watcher::Event::Delete(node)) => {
                fingerprints.remove(&node.name_any());
                node_version.fetch_add(1, Ordering::AcqRel);
            }
            Ok(watcher::Event::InitDone) => {
                node_version.fetch_add(1, Ordering::AcqRel);
                node_wake.notify_one();
            }
            Ok(watcher::Event::Init) => {}
            Err(error) => warn!(%error, "node watch failed; retrying"),
        }
        futures::future::ready(())
    });

    let class_wake = wake.clone();
    let class_version = inventory_version;
    let classes = with_backoff(
        "gpunodeclasses",
        watcher(
            Api::<DeserializeGuard<GpuNodeClass>>::all(client.clone()),
            list_config(),
        ),
    )
    .reflect(node_classes)
    .for_each(move |event| {
        match event {
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
            Ok(watcher::Event::Apply(class)) => {
                if let Err(invalid) = &class.0 {
                    warn!(class = %class.name_any(), error = %invalid.error, "GpuNodeClass cannot be read; ignored");
                }
                class_version.fetch_add(1, Ordering::AcqRel);
                class_wake.notify_one();
            }
            Ok(_) => {
                class_version.fetch_add(1, Ordering::AcqRel);
                class_wake.notify_one();
            }
            Err(error) => warn!(%error, "GpuNodeClass watch failed; retrying"),
        }
        futures::future::ready(())
    });

    let pod_wake = wake;
    let gpu_pods = with_backoff(
        "pods (GPU accounting)",
        watcher(
            Api::<SlimPod>::all(client.clone()),
            list_config().fields(NON_TERMINAL_PODS),
        ),
    )
    .for_each(move |event| {
        match event.map(|event| full_pods(&event)) {
            Ok(event) => {
                // GPUs freed on a node: waiting jobs may fit now.
                let freed = match &event {
                    watcher::Event::Delete(pod) => {
                        pod.spec
                            .as_ref()
                            .and_then(|s| s.node_name.as_ref())
                            .is_some()
                            && pod_gpu_request(pod) > 0
                    }
                    watcher::Event::InitDone => true,
                    _ => false,
                };
                gpu_usage
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .apply_event(&event);
                if freed {
                    pod_wake.notify_one();
                }
            }
            Err(error) => warn!(%error, "pod watch (GPU accounting) failed; retrying"),
        }
        futures::future::ready(())
    });

    let job_pod_store = job_pods.as_reader();
    let mut changed_owners = ChangedPodOwners::default();
    let job_pods = with_backoff(
        "pods (job pods)",
        watcher(Api::<SlimPod>::all(client), list_config().labels(JOB_LABEL)),
    )
    .reflect(job_pods)
    .for_each(move |event| {
        match event {
            Ok(event) => {
                for job in changed_owners.observe(&event, &job_pod_store) {
                    // Fails only once the controller has stopped: nothing left to trigger.
                    let _ = pod_changes.unbounded_send(job);
                }
            }
            Err(error) => warn!(%error, "pod watch (job pods) failed; retrying"),
        }
        futures::future::ready(())
    });

    futures::join!(nodes, classes, gpu_pods, job_pods);
}

/// Objects per page of a watch's (re)list.
pub const LIST_PAGE: u32 = 250;

/// How every watch lists: in pages, from the current state. (`any_semantic`, i.e.
/// `resourceVersion=0`, lets the API server answer from its cache, but then it ignores the page
/// size: 5,000 jobs or pods came as one response of tens of MiB, held and parsed at once, the
/// operator's peak memory.)
pub fn list_config() -> watcher::Config {
    watcher::Config::default().page_size(LIST_PAGE)
}

/// Keeps what reconcile reads from a job: the managed fields (the field sets of every writer,
/// often larger than the job itself) and kubectl's last-applied copy of the object are dropped.
pub fn trim_job(job: &mut DeserializeGuard<InferenceJob>) {
    let metadata = match &mut job.0 {
        Ok(job) => &mut job.metadata,
        Err(invalid) => &mut invalid.metadata,
    };
    metadata.managed_fields = None;
    if let Some(annotations) = metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
}

/// kubectl's client-side apply copy of the whole object.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The InferenceJob that controls `pod` (a `Pod` or a [`SlimPod`]), if any.
pub fn owning_job(pod: &impl ResourceExt) -> Option<JobRef> {
    let namespace = pod.namespace()?;
    pod.owner_references()
        .iter()
        .find(|owner| {
            owner.controller == Some(true)
                && owner.kind == InferenceJob::kind(&())
                && owner.api_version == InferenceJob::api_version(&())
        })
        .map(|owner| JobRef::new(&owner.name).within(&namespace))
}

/// What of a node matters to classes and room: labels, allocatable GPUs, cordon, taints,
/// readiness.
pub fn node_fingerprint(node: &Node) -> u64 {
    let taints = node.spec.as_ref().and_then(|s| s.taints.as_ref());
    let text = format!(
        "{:?}|{:?}|{}|{:?}",
        node.labels(),
        GpuResources::allocatable(node),
        is_schedulable(node),
        taints.map(|t| t
            .iter()
            .map(|t| (&t.key, &t.value, &t.effect))
            .collect::<Vec<_>>())
    );
    fnv1a64(text.as_bytes())
}

/// A watch event of slim pods as one of `Pod`s (what the GPU accounting reads).
fn full_pods(event: &watcher::Event<SlimPod>) -> watcher::Event<Pod> {
    match event {
        watcher::Event::Apply(pod) => watcher::Event::Apply(pod.to_pod()),
        watcher::Event::Delete(pod) => watcher::Event::Delete(pod.to_pod()),
        watcher::Event::InitApply(pod) => watcher::Event::InitApply(pod.to_pod()),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// Keeps only what classes and placement read from a node: its identity and labels, cordon
/// and taints, allocatable GPUs, and whether it is Ready. A real node also carries its images,
/// addresses, system info, every condition with its messages and every allocatable resource:
/// several KiB per node, at 1,000 nodes several MiB of cache nobody reads.
pub fn trim_node(node: &mut Node) {
    let metadata = &mut node.metadata;
    metadata.managed_fields = None;
    metadata.annotations = None;
    metadata.owner_references = None;
    metadata.finalizers = None;
    if let Some(spec) = node.spec.as_mut() {
        *spec = NodeSpec {
            unschedulable: spec.unschedulable,
            taints: spec.taints.take(),
            ..NodeSpec::default()
        };
    }
    if let Some(status) = node.status.as_mut() {
        let allocatable = status.allocatable.take().map(|mut resources| {
            resources.retain(|name, _| is_gpu_resource(name));
            resources
        });
        let ready = status.conditions.take().map(|conditions| {
            conditions
                .into_iter()
                .filter(|c| c.type_ == "Ready")
                .map(|c| NodeCondition {
                    type_: c.type_,
                    status: c.status,
                    ..NodeCondition::default()
                })
                .collect()
        });
        *status = NodeStatus {
            allocatable,
            conditions: ready,
            ..NodeStatus::default()
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use crate::node_classes::allocatable_gpus;

    #[test]
    fn wake_ups_re_plan_only_jobs_that_wait_for_room() {
        use vramfit_api::{InferenceJobStatus, Phase};
        let with_phase = |name: &str, phase: Option<Phase>| {
            let mut job = fixtures::job(name, fixtures::vllm_mistral_spec());
            job.status = phase.map(|phase| InferenceJobStatus {
                phase: Some(phase),
                ..Default::default()
            });
            Arc::new(DeserializeGuard(Ok(job)))
        };
        let jobs = vec![
            with_phase("new", None),
            with_phase("waiting", Some(Phase::Unschedulable)),
            with_phase("invalid", Some(Phase::Pending)),
            with_phase("placed", Some(Phase::Scheduled)),
            with_phase("running", Some(Phase::Running)),
            with_phase("done", Some(Phase::Succeeded)),
        ];
        let names: Vec<String> = waiting_jobs(&jobs).into_iter().map(|r| r.name).collect();
        assert_eq!(names, ["new", "waiting", "invalid"]);
    }

    #[test]
    fn a_pod_change_triggers_only_the_job_that_controls_the_pod() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let owned_by = |kind: &str, controller: Option<bool>| {
            let mut pod = fixtures::pending_pod("chat-1", None);
            pod.metadata.namespace = Some("team-a".to_string());
            pod.metadata.owner_references = Some(vec![OwnerReference {
                api_version: "vramfit.io/v1alpha1".to_string(),
                kind: kind.to_string(),
                name: "chat".to_string(),
                uid: "u".to_string(),
                controller,
                block_owner_deletion: Some(true),
            }]);
            owning_job(&pod)
        };
        assert_eq!(
            owned_by("InferenceJob", Some(true)),
            Some(JobRef::new("chat").within("team-a"))
        );
        assert_eq!(owned_by("InferenceJob", None), None, "not the controller");
        assert_eq!(owned_by("Job", Some(true)), None, "another kind");
        assert_eq!(owning_job(&fixtures::pending_pod("loose", None)), None);
    }

    #[test]
    fn node_fingerprints_follow_what_matters() {
        let node = fixtures::gpu_node("a-1", "a10g", 4, 4);
        let mut heartbeat = node.clone();
        heartbeat.metadata.resource_version = Some("999".into());
        assert_eq!(node_fingerprint(&node), node_fingerprint(&heartbeat));
        let mut relabelled = node.clone();
        relabelled
            .metadata
            .labels
            .get_or_insert_default()
            .insert("x".into(), "y".into());
        assert_ne!(node_fingerprint(&node), node_fingerprint(&relabelled));
        let fewer = fixtures::gpu_node("a-1", "a10g", 4, 3);
        assert_ne!(node_fingerprint(&node), node_fingerprint(&fewer));
    }

    #[test]
    fn trimmed_nodes_answer_placement_as_before() {
        use k8s_openapi::api::core::v1::{ContainerImage, NodeSystemInfo, Taint};
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
        let mut node = fixtures::gpu_node("a-1", "a10g", 4, 3);
        let spec = node.spec.get_or_insert_default();
        spec.pod_cidr = Some("10.0.0.0/24".into());
        spec.taints = Some(vec![Taint {
            key: "gpu".into(),
            effect: "NoSchedule".into(),
            ..Taint::default()
        }]);
        let status = node.status.get_or_insert_default();
        status.images = Some(vec![ContainerImage {
            names: Some(vec!["vllm/vllm-openai:v0.10.1".into()]),
            size_bytes: Some(1 << 33),
        }]);
        status.node_info = Some(NodeSystemInfo::default());
        let allocatable = status.allocatable.get_or_insert_default();
        allocatable.insert("cpu".into(), Quantity("32".into()));
        allocatable.insert("nvidia.com/mig-3g.40gb".into(), Quantity("2".into()));
        status
            .conditions
            .get_or_insert_default()
            .push(NodeCondition {
                type_: "MemoryPressure".into(),
                status: "False".into(),
                message: Some("kubelet has sufficient memory available".into()),
                ..NodeCondition::default()
            });

        let mut trimmed = node.clone();
        trim_node(&mut trimmed);
        assert_eq!(allocatable_gpus(&trimmed), allocatable_gpus(&node));
        assert_eq!(allocatable_gpus(&trimmed), 3);
        assert_eq!(
            GpuResources::allocatable(&trimmed).get("nvidia.com/mig-3g.40gb"),
            2,
            "MIG slices are GPUs too"
        );
        assert_eq!(is_schedulable(&trimmed), is_schedulable(&node));
        assert!(is_schedulable(&trimmed));
        assert_eq!(node_fingerprint(&trimmed), node_fingerprint(&node));
        assert_eq!(trimmed.metadata.labels, node.metadata.labels);
        let status = trimmed.status.unwrap_or_default();
        assert_eq!((status.images, status.node_info), (None, None));
        assert_eq!(
            status.allocatable.map(|a| a.len()),
            Some(2),
            "nvidia.com/gpu and the slices"
        );
        assert_eq!(status.conditions.map(|c| c.len()), Some(1));
        assert_eq!(trimmed.spec.and_then(|s| s.pod_cidr), None);
    }

    #[test]
    fn trimmed_jobs_keep_spec_status_and_identity() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
        let mut job = fixtures::job("chat", fixtures::vllm_mistral_spec());
        job.status = Some(vramfit_api::InferenceJobStatus {
            phase: Some(vramfit_api::Phase::Scheduled),
            ..Default::default()
        });
        job.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("vramfit-operator".into()),
            subresource: Some("status".into()),
            ..Default::default()
        }]);
        job.metadata.annotations = Some(
            [
                (LAST_APPLIED.to_string(), "{...}".to_string()),
                ("team".to_string(), "a".to_string()),
            ]
            .into(),
        );
        let mut guard = DeserializeGuard(Ok(job.clone()));
        trim_job(&mut guard);
        let trimmed = guard.0.unwrap();
        assert_eq!(trimmed.metadata.managed_fields, None);
        assert_eq!(
            trimmed.metadata.annotations,
            Some([("team".to_string(), "a".to_string())].into())
        );
        assert_eq!(trimmed.spec, job.spec);
        assert_eq!(trimmed.status, job.status);
        assert_eq!(
            (
                &trimmed.metadata.uid,
                &trimmed.metadata.resource_version,
                &trimmed.metadata.generation
            ),
            (
                &job.metadata.uid,
                &job.metadata.resource_version,
                &job.metadata.generation
            )
        );
    }

    #[test]
    fn watches_list_in_pages() {
        let config = list_config();
        assert_eq!(config.page_size, Some(LIST_PAGE));
        assert_eq!(config.list_semantic, watcher::ListSemantic::MostRecent);
    }

    /// Regression (seen on a real API server): `/readyz` never turned 200 because a second
    /// waiter on the Controller's job store was never woken.
    #[tokio::test]
    async fn the_replica_turns_ready_once_every_cache_and_the_jobs_are_listed() {
        use http::{Request, Response};
        use kube::client::Body;
        use vramfit_runtime::admin_server::ReadinessSource;
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        // An API server with nothing in it: every list is empty, every watch stays open.
        let server = tokio::spawn(async move {
            let mut open_watches = Vec::new();
            let mut lists = Vec::new();
            while let Some((request, send)) = handle.next_request().await {
                let query = request.uri().query().unwrap_or_default().to_string();
                if query.contains("watch=true") {
                    open_watches.push(send);
                    continue;
                }
                lists.push(request.uri().path().to_string());
                let body = br#"{"metadata":{"resourceVersion":"1"},"items":[]}"#.to_vec();
                send.send_response(Response::builder().body(Body::from(body)).unwrap());
            }
            lists
        });
        let health = Arc::new(Health::new(false));
        let (stop_tx, stop) = watch::channel(false);
        let controller = tokio::spawn(run(
            Client::new(service, "default"),
            Arc::new(Metrics::new()),
            health.clone(),
            ControllerConfig::default(),
            stop,
        ));
        let ready = tokio::time::timeout(Duration::from_secs(10), async {
            while health.readiness().is_err() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        assert!(ready.is_ok(), "not ready: {:?}", health.readiness());
        let _ = stop_tx.send(true);
        let stopped = tokio::time::timeout(Duration::from_secs(10), controller).await;
        assert!(stopped.is_ok(), "the controller stops on the signal");
        assert_eq!(health.readiness(), Err("caches not synced yet".into()));
        server.abort();
    }

    #[tokio::test]
    async fn wake_ups_coalesce() {
        let wake = Arc::new(Notify::new());
        let mut stream = Box::pin(wake_stream(wake.clone(), Duration::from_millis(10)));
        wake.notify_one();
        wake.notify_one();
        assert_eq!(stream.next().await, Some(()));
        let second = tokio::time::timeout(Duration::from_millis(50), stream.next()).await;
        assert!(
            second.is_err(),
            "two wake-ups before the first fired make one re-queue"
        );
    }
}
