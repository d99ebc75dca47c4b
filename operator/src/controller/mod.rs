//! The controller's wiring: reflectors for the stores reconcile reads, and the kube-runtime
//! `Controller` on InferenceJobs.
//!
//! Watches, one stream per purpose:
//!
//! | what | selector | why |
//! |---|---|---|
//! | InferenceJobs | all (with `--watch-namespaces`, one watch per listed namespace) | the controller's own objects, cached compact ([`CachedJob`]: the spec and status as JSON, identity metadata only; a job that does not deserialize is kept with its error and reported, not fatal) |
//! | Pods (store) | `vramfit.io/job` (with `--watch-namespaces`, one watch per listed namespace) | the attempts' pods, every phase, as [`SlimPod`]s: what reconcile observes; each change reconciles the job that controls the pod, once the store holds it |
//! | Pods (GPU usage) | `status.phase!=Succeeded,status.phase!=Failed`, always cluster-wide | GPUs taken per node by any pod, summed event by event (no pod kept; read as [`SlimPod`]s) |
//! | Nodes (store) | all | classes and allocatable GPUs, trimmed of images and managed fields |
//! | GpuNodeClasses (store) | all | class overrides and definitions (`DeserializeGuard`) |
//! | Services, PodDisruptionBudgets (stores) | `vramfit.io/job` (with `--watch-namespaces`, one watch per listed namespace) | served jobs' objects: a change or deletion reconciles the job that controls it, which repairs it ([`crate::controller::served_watches`]) |
//!
//! Re-planning triggers come from the stores' own streams, after the store is updated: a
//! node's labels, allocatable GPUs, taints, cordon or readiness changing, any GpuNodeClass
//! change, or GPUs freed on a node, wake a (coalesced, 1 s) re-queue of the jobs that wait
//! for a class with room (Pending, Unschedulable); placed jobs follow their pods. (`Controller::watches` and
//! `.owns()` would open a second watch whose event can arrive before the store has the
//! change: the reconcile would read the old state and nothing would trigger another.)
//!
//! Every watch lists in pages of [`LIST_PAGE`] and retries with kube's default backoff, except
//! that `410 Expired` lists again at once ([`crate::stores::watch_retry`]); its errors are logged and it
//! resumes.
//! A relist (after `410 Expired`, e.g. once the API server is back) triggers
//! reconciles only when the store holds the whole new list: see [`crate::stores::relist`].
//! The per-namespace watches of `--watch-namespaces` are merged into one store each, a
//! namespace's relist changing only that namespace's objects: see [`crate::stores::namespaces`].
//!
//! [`SlimPod`]: crate::stores::slim::SlimPod
//! [`LIST_PAGE`]: crate::stores::reflectors::LIST_PAGE
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

pub mod served_watches;

use futures::{FutureExt, Stream, StreamExt};
use kube::api::Api;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{Store, reflector};
use kube::runtime::watcher;
use kube::{Client, Resource};
use tokio::sync::{Notify, watch};
use tracing::{debug, info, warn};

use crate::context::Context;
use crate::controller::served_watches::drive_serving_watches;
use crate::dispatch::{error_policy, reconcile};
use crate::error::StartupError;
use crate::health::Health;
use crate::job_gauges::JobGauges;
use crate::metrics::Metrics;
use crate::serving_state::ServingState;
use crate::serving_state::Waiting;
use crate::settings::Settings;
use crate::stores::cached_job::CachedJob;
use crate::stores::namespaces::{WatchNamespaces, watch_namespaces};
use crate::stores::reflectors::{drive_reflectors, list_config};
use crate::stores::relist::applied_after_relist;
use crate::stores::watch_retry::relist_expired_at_once;
use crate::stores::{JobRef, Listing, PodChange, Stores, holds_job};

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
    /// Where InferenceJobs and their pods are watched (`--watch-namespaces`).
    pub namespaces: WatchNamespaces,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            concurrency: 16,
            instance: None,
            settings: Settings::default(),
            wake_coalesce: Duration::from_secs(1),
            namespaces: WatchNamespaces::all(),
        }
    }
}

/// Runs the controller until `stop` turns true and in-flight reconciles finish (`Ok`). Any
/// other end — a reflector or the controller's own stream ending — is an `Err`: the process
/// must not stay up claiming work nobody does. (A reconcile's panic is contained to its job:
/// [`crate::dispatch::contain_panics`].)
pub async fn run(
    client: Client,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    config: ControllerConfig,
    stop: watch::Receiver<bool>,
) -> Result<(), StartupError> {
    let (stores, mut writers) = Stores::writable();
    // The job store is the Controller's, filled by the job reflector below; reconciles read it
    // through `stores.jobs` (whose pod a pod is).
    let job_writer = std::mem::take(&mut writers.jobs);
    // The ModelCache store is filled only with `--model-cache`.
    let model_cache_writer = std::mem::take(&mut writers.model_caches);
    let model_cache_on = config.settings.model_cache.enabled;
    let model_caches_changed = Arc::new(Notify::new());
    let wake = Arc::new(Notify::new());
    let model_cache_watch = model_cache_on.then(|| {
        tokio::spawn(crate::stores::model_caches::drive_model_cache_reflector(
            client.clone(),
            model_cache_writer,
            model_caches_changed.clone(),
            wake.clone(),
            stores.listed.clone(),
            crate::model_cache::changes::CacheChanges::new(crate::model_cache::HEARTBEAT_TRUST)
                .at_now(),
        ))
    });
    let job_store = stores.jobs.clone();
    // Pod changes reach their job through the job-pod store's own stream, after the store
    // holds them: a separate `.owns()` watch could trigger a reconcile that reads the store
    // before the change arrives there, and then nothing would trigger another.
    let (pod_changes, pod_changed) = futures::channel::mpsc::unbounded();
    let changed_jobs = jobs_to_reconcile(pod_changed, job_store.clone());
    let mut reflectors = tokio::spawn(drive_reflectors(
        client.clone(),
        writers,
        wake.clone(),
        pod_changes,
        config.namespaces.clone(),
    ));

    // The job reflector is ours, not the Controller's: its first full list (`InitDone`) is
    // the readiness signal. A second waiter on the Controller's store would not do: kube's
    // `Store::wait_until_ready` wakes only its latest poller, so either that waiter or the
    // Controller's own runner would never wake.
    let ready_health = health.clone();
    let jobs_listed = stores.listed.clone();
    let job_watch = match config.namespaces.listed() {
        // The Controller backs its trigger stream off after an error.
        None => relist_expired_at_once(
            "inferencejobs",
            watcher(Api::<CachedJob>::all(client.clone()), list_config()),
        )
        .boxed(),
        // Each namespace backs off on its own; the first `InitDone` comes once all have listed.
        Some(namespaces) => watch_namespaces(
            &client,
            namespaces,
            &list_config(),
            job_store.clone(),
            "inferencejobs",
        )
        .boxed(),
    };
    // Served jobs' Services and PDBs: a change or deletion reconciles the owning job.
    let (serving, serving_writers) = ServingState::writable();
    let serving_stores = serving.stores.clone();
    let (serving_changes, changed_served_jobs) = futures::channel::mpsc::unbounded();
    let serving_watches = tokio::spawn(drive_serving_watches(
        client.clone(),
        serving_writers,
        config.namespaces.clone(),
        serving_changes,
    ));
    let ctx = Arc::new(
        Context::new(
            client.clone(),
            metrics.clone(),
            stores.clone(),
            config.settings.clone(),
            config.instance.clone(),
        )
        .with_serving(serving),
    );
    let job_gauges = Arc::new(JobGauges::default());
    let counted = job_gauges.clone();
    let served_counted = ctx.serving.gauges();
    let forgetting = (ctx.clone(), job_store.clone());
    let job_events = reflector(job_writer, job_watch).inspect(move |event| {
        if let Ok(event) = event {
            counted.apply(event);
            served_counted.apply(event);
            forget_deleted_jobs(event, &forgetting.0, &forgetting.1);
        }
        if matches!(event, Ok(watcher::Event::InitDone)) {
            jobs_listed.mark(Listing::Jobs);
            ready_health.set_synced(true);
        }
    });
    let controller = Controller::for_stream(
        applied_after_relist(job_events, job_store.clone()),
        job_store.clone(),
    );
    health.set_gauge_source(gauge_source(job_gauges, ctx.clone()));

    // Reconciling before the stores have listed would see no nodes and park every job.
    info!("waiting for the node, pod and GpuNodeClass caches");
    let mut waiting = stop.clone();
    let synced = async {
        stores.wait_until_ready().await?;
        if model_cache_on {
            stores.model_caches.wait_until_ready().await?;
        }
        serving_stores.wait_until_ready().await
    };
    tokio::select! {
        synced = synced => if synced.is_err() {
            reflectors.abort();
            serving_watches.abort();
            if let Some(watch) = &model_cache_watch {
                watch.abort();
            }
            return Err(StartupError::ControllerEnded("a store's reflector ended before it synced".into()));
        },
        _ = waiting.wait_for(|stopped| *stopped) => {
            reflectors.abort();
            serving_watches.abort();
            if let Some(watch) = &model_cache_watch {
                watch.abort();
            }
            return Ok(());
        }
    }
    info!("caches synced; starting the controller (ready once the jobs are listed)");
    // Leader only, as the whole controller: the nodes' ModelCache specs and the volume sweep.
    let model_cache_sync = model_cache_on.then(|| {
        tokio::spawn(crate::cache_sync::run(
            ctx.clone(),
            model_caches_changed.clone(),
            stop.clone(),
        ))
    });

    // Leader only: the autoscaler's reads of replicas' metrics; each job read is reconciled.
    let (read_jobs, jobs_read) = futures::channel::mpsc::unbounded();
    let load_reader = tokio::spawn(crate::load_reader::run(
        ctx.clone(),
        read_jobs,
        stop.clone(),
    ));

    let reconciling = controller
        .reconcile_on(changed_jobs)
        .reconcile_on(jobs_read)
        .reconcile_on(changed_served_jobs)
        .reconcile_on(waiting_jobs_on(
            wake_stream(wake, config.wake_coalesce),
            job_store.clone(),
            ctx.serving.waiting(),
        ))
        .with_config(controller::Config::default().concurrency(config.concurrency))
        .graceful_shutdown_on(shutdown_future(stop.clone()))
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            match result {
                Ok((job, _)) => {
                    debug!(job = %job, "reconciled");
                    #[cfg(feature = "fault-injection")]
                    crate::fault_injection::controller_checkpoint(&job.name);
                }
                Err(controller::Error::ObjectNotFound(job)) => {
                    debug!(job = %job, "job gone before its reconcile")
                }
                Err(controller::Error::ReconcilerFailed(..)) => {} // logged by error_policy
                Err(error) => warn!(%error, "controller"),
            }
        });
    // The reflectors feed every store the reconciles read: if they end, the controller would
    // go on deciding from stale caches.
    let ended = tokio::select! {
        () = reconciling => None,
        joined = &mut reflectors => Some(match joined {
            Ok(()) => "the reflectors ended".to_string(),
            Err(error) => format!("the reflectors' task failed: {error}"),
        }),
    };
    health.set_synced(false);
    reflectors.abort();
    serving_watches.abort();
    load_reader.abort();
    for task in [model_cache_watch, model_cache_sync].into_iter().flatten() {
        task.abort();
    }
    match ended {
        Some(why) => Err(StartupError::ControllerEnded(why)),
        None if *stop.borrow() => {
            info!("controller stopped");
            Ok(())
        }
        None => Err(StartupError::ControllerEnded(
            "the controller's streams ended".into(),
        )),
    }
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

/// The function `/metrics` calls to refresh the job and inventory gauges: it copies counts
/// kept up to date as the watches go (one per phase and class), and reads no job or node.
fn gauge_source(jobs: Arc<JobGauges>, ctx: Arc<Context>) -> Box<dyn Fn() + Send + Sync> {
    Box::new(move || {
        ctx.metrics.observe_job_totals(jobs.totals());
        ctx.metrics
            .serving()
            .observe_ready(ctx.serving.gauges().totals());
        ctx.metrics
            .serving()
            .observe_waiting_for_model(ctx.serving.gauges().waiting_for_model());
        ctx.metrics
            .observe_inventory(ctx.inventory().gpu_inventory());
    })
}

/// Forgets what the context keeps about a job once it is deleted (after a relist: every job
/// the new list no longer has), so that per-job state never outlives its job.
pub fn forget_deleted_jobs(
    event: &watcher::Event<CachedJob>,
    ctx: &Context,
    jobs: &Store<CachedJob>,
) {
    match event {
        watcher::Event::Delete(job) => {
            ctx.forget_job(job.meta().uid.as_deref(), &crate::dispatch::job_key(job));
        }
        watcher::Event::InitDone => {
            let listed = jobs.state();
            let uids: std::collections::HashSet<&str> = listed
                .iter()
                .filter_map(|j| j.meta().uid.as_deref())
                .collect();
            let keys: std::collections::HashSet<String> =
                listed.iter().map(|j| crate::dispatch::job_key(j)).collect();
            ctx.keep_jobs(|uid| uids.contains(uid), |key| keys.contains(key));
        }
        _ => {}
    }
}

/// The jobs whose pods changed, as far as the pods are theirs: a pod whose controller owner
/// reference names a job triggers it when the uid matches the job in the store (anyone who may
/// create pods can point a reference at someone's job), or when the pod went (its name may be
/// the one a job waits for: `PodNameTaken`).
pub fn jobs_to_reconcile(
    changes: impl Stream<Item = PodChange> + Send + 'static,
    jobs: Store<CachedJob>,
) -> impl Stream<Item = JobRef> + Send + 'static {
    changes.filter_map(move |change| {
        let theirs = if change.gone {
            jobs.get(&change.owner.job).is_some()
        } else {
            holds_job(&jobs, &change.owner)
        };
        futures::future::ready(theirs.then_some(change.owner.job))
    })
}

/// For each wake-up, the jobs a change of nodes, classes or free GPUs can move: those not
/// placed yet (Pending, Unschedulable), and served jobs with a replica that waits for room.
/// Placed and finished jobs follow their pods instead.
pub fn waiting_jobs_on(
    wakes: impl Stream<Item = ()> + Send + 'static,
    jobs: Store<CachedJob>,
    served: Arc<Waiting>,
) -> impl Stream<Item = JobRef> + Send + 'static {
    wakes.flat_map(move |()| {
        let mut waiting = waiting_jobs(&jobs.state());
        // A served job deleted since it waited is not reconciled for nothing.
        waiting.extend(
            served
                .jobs()
                .into_iter()
                .filter(|job| jobs.get(job).is_some()),
        );
        futures::stream::iter(waiting)
    })
}

/// The jobs of `jobs` that wait for a class with room (or have not been planned yet). A job
/// whose status says its current generation is invalid waits for a new generation, which its
/// own watch event brings: no node or class change can help it.
pub fn waiting_jobs(jobs: &[Arc<CachedJob>]) -> Vec<JobRef> {
    jobs.iter()
        .filter(|job| {
            job.is_valid()
                && !job.invalid_spec_is_current()
                && matches!(
                    job.phase(),
                    None | Some(vramfit_api::Phase::Pending | vramfit_api::Phase::Unschedulable)
                )
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    #[test]
    fn wake_ups_re_plan_only_jobs_that_wait_for_room() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        use k8s_openapi::jiff::Timestamp;
        use vramfit_api::conditions::{ConditionType, ConditionsUpdate, Reason};
        use vramfit_api::{InferenceJobStatus, Phase};
        let with_phase = |name: &str, phase: Option<Phase>| {
            let mut job = fixtures::job(name, fixtures::vllm_mistral_spec());
            job.status = phase.map(|phase| InferenceJobStatus {
                phase: Some(phase),
                ..Default::default()
            });
            Arc::new(CachedJob::of(&job))
        };
        // Pending with InvalidSpec=True: for the job's generation, and for an older one (the
        // user changed the spec since, and the reconcile of the change has not run yet).
        let invalid = |name: &str, observed: i64| {
            let mut job = fixtures::job(name, fixtures::invalid_spec());
            job.metadata.generation = Some(2);
            let mut status = InferenceJobStatus {
                phase: Some(Phase::Pending),
                ..Default::default()
            };
            ConditionsUpdate::new(
                &mut status.conditions,
                Some(observed),
                &Time(Timestamp::now()),
            )
            .set(ConditionType::InvalidSpec, true, Reason::InvalidSpec, "bad");
            job.status = Some(status);
            Arc::new(CachedJob::of(&job))
        };
        let jobs = vec![
            with_phase("new", None),
            with_phase("waiting", Some(Phase::Unschedulable)),
            with_phase("name-taken", Some(Phase::Pending)),
            invalid("invalid-now", 2),
            invalid("fixed-since", 1),
            with_phase("placed", Some(Phase::Scheduled)),
            with_phase("running", Some(Phase::Running)),
            with_phase("done", Some(Phase::Succeeded)),
        ];
        let names: Vec<String> = waiting_jobs(&jobs).into_iter().map(|r| r.name).collect();
        assert_eq!(names, ["new", "waiting", "name-taken", "fixed-since"]);
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

    /// With `--watch-namespaces`, jobs and job pods are listed per namespace, the rest
    /// cluster-wide, and the replica is ready only once every namespace has listed.
    #[tokio::test]
    async fn with_watched_namespaces_the_replica_is_ready_once_every_namespace_listed() {
        use http::{Request, Response};
        use kube::client::Body;
        use vramfit_runtime::admin_server::ReadinessSource;
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let release_team_b = Arc::new(Notify::new());
        let release = release_team_b.clone();
        let lists = Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
        let listed = lists.clone();
        let server = tokio::spawn(async move {
            let mut open_watches = Vec::new();
            while let Some((request, send)) = handle.next_request().await {
                let query = request.uri().query().unwrap_or_default().to_string();
                if query.contains("watch=true") {
                    open_watches.push(send);
                    continue;
                }
                let path = request.uri().path().to_string();
                let selector = if query.contains("labelSelector") {
                    " (vramfit.io/job)"
                } else if query.contains("fieldSelector") {
                    " (GPU accounting)"
                } else {
                    ""
                };
                listed.lock().unwrap().insert(format!("{path}{selector}"));
                let body = br#"{"metadata":{"resourceVersion":"1"},"items":[]}"#.to_vec();
                let answer = Response::builder().body(Body::from(body)).unwrap();
                if path.ends_with("/namespaces/team-b/inferencejobs") {
                    // team-b's job list comes late.
                    let release = release.clone();
                    tokio::spawn(async move {
                        release.notified().await;
                        send.send_response(answer);
                    });
                } else {
                    send.send_response(answer);
                }
            }
        });
        let health = Arc::new(Health::new(false));
        let (stop_tx, stop) = watch::channel(false);
        let config = ControllerConfig {
            namespaces: WatchNamespaces::parse("team-a,team-b").unwrap(),
            ..ControllerConfig::default()
        };
        let controller = tokio::spawn(run(
            Client::new(service, "default"),
            Arc::new(Metrics::new()),
            health.clone(),
            config,
            stop,
        ));
        let ready = || async {
            tokio::time::timeout(Duration::from_secs(10), async {
                while health.readiness().is_err() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await
        };
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            health.readiness().is_err(),
            "ready before team-b's jobs were listed"
        );
        release_team_b.notify_one();
        assert!(ready().await.is_ok(), "not ready: {:?}", health.readiness());
        let _ = stop_tx.send(true);
        let stopped = tokio::time::timeout(Duration::from_secs(10), controller).await;
        assert!(stopped.is_ok(), "the controller stops on the signal");
        server.abort();
        let jobs = "/apis/vramfit.io/v1alpha1/namespaces";
        assert_eq!(
            lists.lock().unwrap().iter().collect::<Vec<_>>(),
            [
                "/api/v1/namespaces/team-a/pods (vramfit.io/job)",
                "/api/v1/namespaces/team-a/services (vramfit.io/job)",
                "/api/v1/namespaces/team-b/pods (vramfit.io/job)",
                "/api/v1/namespaces/team-b/services (vramfit.io/job)",
                "/api/v1/nodes",
                "/api/v1/pods (GPU accounting)",
                "/apis/networking.k8s.io/v1/namespaces/team-a/networkpolicies (vramfit.io/job)",
                "/apis/networking.k8s.io/v1/namespaces/team-b/networkpolicies (vramfit.io/job)",
                "/apis/policy/v1/namespaces/team-a/poddisruptionbudgets (vramfit.io/job)",
                "/apis/policy/v1/namespaces/team-b/poddisruptionbudgets (vramfit.io/job)",
                "/apis/vramfit.io/v1alpha1/gpunodeclasses",
                &format!("{jobs}/team-a/inferencejobs"),
                &format!("{jobs}/team-b/inferencejobs"),
            ],
            "jobs, job pods, served jobs' Services and PDBs and groups' NetworkPolicies (by the job label) per namespace, the rest cluster-wide"
        );
    }

    /// A pod is a job's only when its owner reference's uid is the job's: someone else's pod
    /// pointing at the job triggers nothing, except when it goes (its name may be the one the
    /// job waits for).
    #[tokio::test]
    async fn pod_changes_trigger_only_the_job_that_really_owns_the_pod() {
        use crate::stores::{PodChange, PodOwner};
        use kube::runtime::reflector;
        let (store, mut writer) = reflector::store::<CachedJob>();
        let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
        writer.apply_watcher_event(&watcher::Event::Apply(CachedJob::of(&job)));
        let change = |name: &str, uid: String, gone: bool| PodChange {
            owner: PodOwner {
                job: JobRef::new(name).within(fixtures::NAMESPACE),
                uid,
            },
            gone,
        };
        let triggers = |change: PodChange| {
            let jobs = jobs_to_reconcile(futures::stream::iter([change]), store.clone());
            async move { jobs.collect::<Vec<_>>().await.len() == 1 }
        };
        assert!(triggers(change("chat", fixtures::uid("chat"), false)).await);
        assert!(
            !triggers(change("chat", "forged".into(), false)).await,
            "a reference to the job with another uid"
        );
        assert!(
            triggers(change("chat", "an-earlier-chat".into(), true)).await,
            "a pod of the job's name that went"
        );
        assert!(
            !triggers(change("gone-job", fixtures::uid("gone-job"), false)).await,
            "a job the store does not hold"
        );
        assert!(!triggers(change("gone-job", fixtures::uid("gone-job"), true)).await);
    }

    /// What the context keeps per job (failure counts, malformed reports, the last status
    /// write) goes with the job: a tenant creating and deleting jobs cannot grow it for ever.
    #[tokio::test]
    async fn a_deleted_job_leaves_nothing_behind_in_the_context() {
        use kube::runtime::reflector;
        let (ctx, _api, _writers) = crate::verifier::test_context();
        let (store, mut writer) = reflector::store::<CachedJob>();
        let remember = |name: &str| {
            let uid = fixtures::uid(name);
            ctx.record_failure(&format!("{}/{name}", fixtures::NAMESPACE));
            ctx.first_report_of_malformed(&uid, Some(1));
            ctx.remember_status_write(&uid, "7");
        };
        let cached =
            |name: &str| CachedJob::of(&fixtures::job(name, fixtures::vllm_mistral_spec()));
        remember("gone");
        remember("kept");
        assert_eq!(ctx.per_job_entries(), 6);
        forget_deleted_jobs(&watcher::Event::Delete(cached("gone")), &ctx, &store);
        assert_eq!(
            ctx.per_job_entries(),
            3,
            "the deleted job's three entries went"
        );

        // Deleted while the watch was away: the relist's end drops what the new list lacks.
        remember("deleted-unseen");
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(cached("kept")),
            watcher::Event::InitDone,
        ] {
            writer.apply_watcher_event(&event);
            forget_deleted_jobs(&event, &ctx, &store);
        }
        assert_eq!(
            ctx.per_job_entries(),
            3,
            "only the listed job's entries are left"
        );
        assert!(ctx.is_stale(&fixtures::uid("kept"), "7"));
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
