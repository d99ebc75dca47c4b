//! The leader's model cache task (API): every [`crate::model_cache::SYNC_PERIOD`], and when a
//! ModelCache changes, it computes the models each GPU node should hold
//! ([`crate::model_cache::wanted`]) and server-side applies each node's `ModelCache` spec whose
//! stored spec differs (field manager `vramfit-operator`; a new object is owned by its Node, so
//! it goes with the node). A node that wants nothing any more gets an empty spec, never a
//! deletion: its agent's status still lists what is on disk. The same pass deletes the model
//! PersistentVolumes whose claim went (`Released`).
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PersistentVolume};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tokio::sync::{Notify, watch};
use tracing::{debug, warn};
use vramfit_api::model_cache::{
    ModelCacheSpec, POD_MODEL_ANNOTATION, VOLUME_LABEL, WantedModel, key_problem,
};
use vramfit_api::{InferenceJob, ModelCache, Phase, Plan};

use crate::capacity::PodConstraints;
use crate::capacity::room::free_per_node;
use crate::context::Context;
use crate::model_cache::job_model::job_model;
use crate::model_cache::view::NodeCache;
use crate::model_cache::wanted::{JobWant, MountingPod, WantedInput, wanted_models};
use crate::model_cache::{HEARTBEAT_TRUST, SYNC_PERIOD};
use crate::stores::slim::SlimPod;
use crate::stores::{Listing, PodOwner, Stores, is_finished, pod_owner};

/// Runs the sync until `stop` turns true (the controller runs only while leading, and so does
/// this task).
pub async fn run(ctx: Arc<Context>, changed: Arc<Notify>, mut stop: watch::Receiver<bool>) {
    loop {
        sync_once(&ctx).await;
        tokio::select! {
            () = tokio::time::sleep(SYNC_PERIOD) => {}
            () = changed.notified() => {
                // Coalesce a burst of status writes from the agents.
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
            changed = stop.changed() => if changed.is_err() || *stop.borrow() {
                return;
            },
        }
    }
}

/// One pass: the specs, then the released volumes.
pub async fn sync_once(ctx: &Arc<Context>) {
    let Some(desired) = desired_specs_off_runtime(ctx.clone()).await else {
        debug!("model cache sync waits for every store it reads to be listed");
        return;
    };
    let stored: BTreeMap<String, Arc<ModelCache>> = ctx
        .stores
        .model_caches
        .state()
        .into_iter()
        .map(|c| (c.name_any(), c))
        .collect();
    let api = Api::<ModelCache>::all(ctx.client.clone());
    for (node, (uid, models)) in desired {
        let current = stored.get(&node);
        // Every GPU node gets its ModelCache, empty too: its agent writes its status there
        // (a heartbeat placement trusts) before any job asks it for a model.
        let unchanged = current.is_some_and(|cache| cache.spec.models == models);
        if unchanged {
            continue;
        }
        let body = spec_patch(&node, &uid, &models);
        let params = PatchParams::apply(crate::FIELD_MANAGER).force();
        match api.patch(&node, &params, &Patch::Apply(&body)).await {
            Ok(_) => debug!(%node, models = models.len(), "ModelCache spec applied"),
            Err(error) => warn!(%node, %error, "ModelCache spec not applied; retried next pass"),
        }
    }
    sweep_released_volumes(ctx).await;
}

/// [`desired_specs`] on a blocking thread. Its work grows with nodes × jobs × models (every
/// job read back from the cache, every node's list) and the operator runs one runtime thread
/// by default, the one that renews the leader lease, answers probes and reconciles: that
/// thread never waits for it. `None` when the stores are not listed yet or the pass failed
/// (a panic is logged; the next pass tries again and no spec is written meanwhile).
pub async fn desired_specs_off_runtime(
    ctx: Arc<Context>,
) -> Option<BTreeMap<String, (String, Vec<WantedModel>)>> {
    let runtime = tokio::runtime::Handle::current();
    // A blocking thread is outside the runtime: it may drive the (IO-free) future itself.
    let pass = tokio::task::spawn_blocking(move || runtime.block_on(desired_specs(&ctx)));
    match pass.await {
        Ok(desired) => desired,
        Err(error) => {
            warn!(%error, "model cache specs not computed; retried next pass");
            None
        }
    }
}

/// The server-side apply body of node `node`'s ModelCache.
pub fn spec_patch(node: &str, node_uid: &str, models: &[WantedModel]) -> serde_json::Value {
    json!({
        "apiVersion": ModelCache::api_version(&()),
        "kind": ModelCache::kind(&()),
        "metadata": {
            "name": node,
            "ownerReferences": [{
                "apiVersion": Node::api_version(&()),
                "kind": Node::kind(&()),
                "name": node,
                "uid": node_uid,
            }],
        },
        "spec": ModelCacheSpec { models: models.to_vec() },
    })
}

/// Jobs parsed between two yields: a job is inflated from the cache's compressed JSON (tens of
/// µs), and the runtime may have one thread that reconciles too.
const JOBS_PER_YIELD: usize = 64;

/// Whether every store the sync reads has its first full list: nodes and GpuNodeClasses (the
/// GPU nodes and classes), vramfit's pods, the GPU usage, the jobs and the ModelCaches. Before
/// that, a pass would ask nodes for less than they hold (on a restart, every node for nothing
/// until the jobs are listed).
pub fn stores_listed(stores: &Stores) -> bool {
    stores.listed.all(&Listing::ALL) && stores.usage().is_listed()
}

/// Every GPU node (name → uid) with its desired models (empty when it should hold none);
/// `None` until [`stores_listed`].
pub async fn desired_specs(ctx: &Context) -> Option<BTreeMap<String, (String, Vec<WantedModel>)>> {
    if !stores_listed(&ctx.stores) {
        return None;
    }
    let inventory = ctx.inventory();
    let now = Time(Timestamp::now());
    let mut class_nodes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut gpu_nodes: BTreeMap<String, String> = BTreeMap::new();
    for info in &inventory.nodes {
        gpu_nodes.insert(info.name.clone(), info.node.uid().unwrap_or_default());
        for &index in &info.classes {
            if let Some(class) = inventory.classes.get(index) {
                class_nodes
                    .entry(class.name.clone())
                    .or_default()
                    .push(info.name.clone());
            }
        }
    }
    let caches: BTreeMap<String, NodeCache> = ctx
        .stores
        .model_caches
        .state()
        .iter()
        .map(|c| (c.name_any(), NodeCache::of(c, &now, HEARTBEAT_TRUST)))
        .collect();
    // Room per node whatever a job tolerates (GPU nodes are often tainted): which nodes a
    // replica could wait for, asked first.
    let free: BTreeMap<(String, String), u32> = {
        let usage = ctx.stores.usage();
        free_per_node(&inventory, &usage, &PodConstraints::default())
            .map(|node| ((node.class.name.clone(), node.node.to_string()), node.free))
            .collect()
    };
    let PodsSeen {
        mounting,
        nodes_of_job,
    } = pods_seen(&ctx.stores.job_pods.state(), &|owner| {
        ctx.stores.is_job_of(owner)
    });
    let mut jobs: Vec<JobWant> = Vec::new();
    for (index, cached) in ctx.stores.jobs.state().iter().enumerate() {
        if index % JOBS_PER_YIELD == JOBS_PER_YIELD - 1 {
            tokio::task::yield_now().await;
        }
        if let Some(want) = cached
            .job()
            .ok()
            .and_then(|job| job_want(&job, &nodes_of_job))
        {
            jobs.push(want);
        }
    }
    let wanted = wanted_models(&WantedInput {
        jobs: &jobs,
        mounting: &mounting,
        class_nodes: &class_nodes,
        caches: &caches,
        free: &free,
        prefetch_nodes: ctx.settings.model_cache.prefetch_nodes,
    });
    Some(
        gpu_nodes
            .into_iter()
            .map(|(node, uid)| {
                let models = wanted.get(&node).cloned().unwrap_or_default();
                (node, (uid, models))
            })
            .collect(),
    )
}

/// What the sync reads of vramfit's pods.
#[derive(Debug, Default, PartialEq)]
pub struct PodsSeen {
    /// The live pods that mount a cached model.
    pub mounting: Vec<MountingPod>,
    /// The nodes of each job's live pods, by job uid.
    pub nodes_of_job: BTreeMap<String, BTreeSet<String>>,
}

/// Reads the bound, unfinished pods among `pods`. A pod counts only when a job controls it
/// (`is_job_of`: its controller owner reference names an InferenceJob of the job store, with
/// that job's uid; [`crate::stores::Stores::is_job_of`], the check room makes of unbound
/// pods): anyone who may create pods can give one vramfit's labels and annotations, and such a
/// pod must not pin, fetch or crowd out models on a node. A model key the ModelCache schema
/// would refuse is left out (and logged), so that it never blocks the node's spec.
pub fn pods_seen(pods: &[Arc<SlimPod>], is_job_of: &dyn Fn(&PodOwner) -> bool) -> PodsSeen {
    let mut seen = PodsSeen::default();
    for pod in pods {
        if is_finished(pod.status.as_ref().and_then(|s| s.phase.as_deref())) {
            continue;
        }
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            continue;
        };
        let Some(owner) = pod_owner(pod.as_ref()).filter(|owner| is_job_of(owner)) else {
            continue;
        };
        let namespace = pod.namespace().unwrap_or_default();
        if let Some(key) = pod.annotation(POD_MODEL_ANNOTATION) {
            let (repo, revision) = key.split_once('@').unwrap_or((key.as_str(), ""));
            match key_problem(repo, revision) {
                None => seen.mounting.push(MountingPod {
                    node: node.clone(),
                    namespace,
                    key: key.clone(),
                }),
                Some(problem) => warn!(
                    pod = %pod.name_any(), %key, problem,
                    "the pod's cached model is not a valid key; not marked in use"
                ),
            }
        }
        seen.nodes_of_job.entry(owner.uid).or_default().insert(node);
    }
    seen
}

/// What `job` wants cached, if anything: its model, its pods' nodes and its planned classes
/// (a served job's replicas' classes; a batch job's or group's attempt class, also while the
/// attempt waits for its model), a group's class asked at least as many nodes as the group
/// has pods. A finished job wants nothing.
fn job_want(
    job: &InferenceJob,
    nodes_of_job: &BTreeMap<String, BTreeSet<String>>,
) -> Option<JobWant> {
    let model = job_model(job)?;
    if let Some(problem) = key_problem(&model.repo, &model.revision) {
        // Only a job stored before the CRD's rules can name one: asking a node for it would
        // have the whole spec refused.
        warn!(job = %job.name_any(), key = %model.key, problem, "the job's model is not a valid cache key; not cached");
        return None;
    }
    let status = job.status.as_ref();
    if status.and_then(|s| s.phase).is_some_and(Phase::is_terminal) {
        return None;
    }
    let mut classes: Vec<String> = status
        .map(|s| {
            s.replica_statuses
                .iter()
                .flat_map(|l| {
                    std::iter::once(l.node_class.clone())
                        .chain(l.surge.as_ref().map(|s| s.node_class.clone()))
                })
                .filter(|c| !c.is_empty())
                .collect()
        })
        .unwrap_or_default();
    if job.spec.serve.is_none() {
        classes.extend(status.and_then(|s| s.node_class.clone()));
    }
    let pod_nodes = job
        .metadata
        .uid
        .as_ref()
        .and_then(|uid| nodes_of_job.get(uid))
        .map(|nodes| nodes.iter().cloned().collect())
        .unwrap_or_default();
    Some(JobWant {
        namespace: job.namespace().unwrap_or_default(),
        model,
        pod_nodes,
        classes,
        nodes_per_class: group_pods(job),
        gpus_per_pod: status
            .and_then(|s| s.plan.as_ref())
            .map_or(1, |plan| plan.gpu_count.max(1)),
    })
}

/// The pods of a batch group's attempt: its plan's nodes; `maxNodes` while the next attempt
/// waits for its model or none is planned yet (the next plan's size is not known here, and
/// fewer nodes asked than the group needs would keep it waiting); `maxNodes` for a served
/// job whose replicas are groups (each replica has its own plan); 0 for other jobs.
fn group_pods(job: &InferenceJob) -> usize {
    let spec = &job.spec;
    if spec.gpus.max_nodes <= 1 {
        return 0;
    }
    if spec.serve.is_some() {
        return spec.gpus.max_nodes as usize;
    }
    let status = job.status.as_ref();
    let waiting = status.is_some_and(|s| s.replicas_waiting_for_model.is_some());
    let planned = status.and_then(|s| s.plan.as_ref()).map(Plan::nodes);
    let nodes = match planned {
        Some(nodes) if !waiting => nodes,
        _ => spec.gpus.max_nodes,
    };
    nodes as usize
}

/// Deletes the model volumes whose claim is gone (phase `Released`): the claim went with its
/// job, and the volume is `Retain` so that the node's files are never touched by Kubernetes.
async fn sweep_released_volumes(ctx: &Context) {
    let api = Api::<PersistentVolume>::all(ctx.client.clone());
    let volumes = match api
        .list(&ListParams::default().labels(&format!("{VOLUME_LABEL}=true")))
        .await
    {
        Ok(list) => list.items,
        Err(error) => {
            warn!(%error, "model volumes not listed; swept next pass");
            return;
        }
    };
    for volume in volumes.iter().filter(|v| is_released(v)) {
        let name = volume.name_any();
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => debug!(volume = %name, "released model volume deleted"),
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => warn!(volume = %name, %error, "released model volume not deleted"),
        }
    }
}

/// Whether `volume`'s claim went.
pub fn is_released(volume: &PersistentVolume) -> bool {
    volume.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use vramfit_api::checkpoint::HuggingFaceModel;

    /// A batch job of model `o/m`, maxNodes `max_nodes`, with `status`.
    fn batch(max_nodes: u32, status: vramfit_api::InferenceJobStatus) -> InferenceJob {
        let mut spec = fixtures::vllm_mistral_spec();
        spec.gpus.max_nodes = max_nodes;
        spec.model.hugging_face = Some(HuggingFaceModel {
            repo: "o/m".into(),
            ..Default::default()
        });
        let mut job = fixtures::job("train", spec);
        job.status = Some(status);
        job
    }

    #[test]
    fn a_batch_job_wants_its_model_on_its_attempt_class_and_pod_nodes_until_it_ends() {
        let uid = fixtures::uid("train");
        let nodes = BTreeMap::from([(uid, BTreeSet::from(["l-2".to_string()]))]);
        let waiting = vramfit_api::InferenceJobStatus {
            phase: Some(Phase::Pending),
            node_class: Some("l40s-x1".into()),
            replicas_waiting_for_model: Some(1),
            ..Default::default()
        };
        let want = job_want(&batch(1, waiting.clone()), &nodes).unwrap();
        assert_eq!(want.model.key, "o/m@main");
        assert_eq!(want.classes, ["l40s-x1"]);
        assert_eq!(want.pod_nodes, ["l-2"]);
        assert_eq!(want.nodes_per_class, 0, "one pod: the prefetch count");
        for phase in [Phase::Succeeded, Phase::Failed] {
            let ended = vramfit_api::InferenceJobStatus {
                phase: Some(phase),
                ..waiting.clone()
            };
            assert!(job_want(&batch(1, ended), &nodes).is_none(), "{phase:?}");
        }
    }

    #[test]
    fn a_group_asks_as_many_nodes_as_it_has_pods_or_may_have_while_it_waits() {
        let nodes = BTreeMap::new();
        let waiting = vramfit_api::InferenceJobStatus {
            node_class: Some("a10g-x4".into()),
            replicas_waiting_for_model: Some(1),
            ..Default::default()
        };
        assert_eq!(
            job_want(&batch(3, waiting), &nodes)
                .unwrap()
                .nodes_per_class,
            3,
            "waiting: as many as maxNodes"
        );
        let mut spec = fixtures::vllm_mistral_spec();
        spec.context_length = Some(8192);
        let input = vramfit_planner::resolve_job(&spec).unwrap();
        let class = fixtures::class("a10g", 4);
        let plan = crate::group::testing::two_node_plan(&input, &class);
        let running = vramfit_api::InferenceJobStatus {
            phase: Some(Phase::Running),
            node_class: Some(class.name.clone()),
            plan: Some(plan),
            ..Default::default()
        };
        assert_eq!(
            job_want(&batch(3, running), &nodes)
                .unwrap()
                .nodes_per_class,
            2,
            "running: the plan's nodes"
        );
    }

    #[test]
    fn the_spec_patch_is_owned_by_the_node() {
        let body = spec_patch("gpu-1", "uid-1", &[]);
        assert_eq!(body["kind"], "ModelCache");
        assert_eq!(body["metadata"]["ownerReferences"][0]["kind"], "Node");
        assert_eq!(body["metadata"]["ownerReferences"][0]["uid"], "uid-1");
        assert_eq!(
            body["spec"],
            json!({"models": []}),
            "an empty list drops the models this manager set (`spec: {{}}` would be read as null)"
        );
    }

    /// A pass runs on a blocking thread: the runtime thread (one, as the operator runs by
    /// default) keeps firing timers — the lease's renewal among them — while a pass is held
    /// up. Here the pass waits 400 ms for the GPU usage, which another thread holds; a timer
    /// of 5 ms must keep ticking meanwhile (before, the pass ran on the runtime thread and no
    /// timer fired until it was done).
    #[tokio::test]
    async fn a_pass_leaves_the_runtime_thread_free() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::time::Duration;
        let (ctx, mut api, mut writers, _serving) =
            crate::verifier::test_context_with_settings(crate::settings::Settings::default());
        writers.mark_ready();
        let usage = writers.gpu_usage.clone();
        let ticks = Arc::new(AtomicUsize::new(0));
        let counted = ticks.clone();
        let (locked, is_locked) = std::sync::mpsc::channel();
        let holder = std::thread::spawn(move || {
            let _held = usage.write().unwrap();
            locked.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(100));
            let before = counted.load(Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(300));
            counted.load(Ordering::SeqCst) - before
        });
        is_locked.recv().unwrap();
        let ticker = tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(5));
            loop {
                every.tick().await;
                ticks.fetch_add(1, Ordering::SeqCst);
            }
        });
        let pass = tokio::spawn({
            let ctx = ctx.clone();
            async move { sync_once(&ctx).await }
        });
        // No GPU node: no spec to write; then the sweep lists the model volumes.
        let (request, send) = api.next().await;
        assert_eq!(request.method(), http::Method::GET);
        crate::verifier::respond(
            send,
            200,
            &json!({"apiVersion": "v1", "kind": "PersistentVolumeList", "metadata": {}, "items": []}),
        );
        pass.await.unwrap();
        ticker.abort();
        let ticked = holder.join().unwrap();
        assert!(
            ticked >= 10,
            "the runtime thread ticked {ticked} times in 300 ms while the pass waited"
        );
    }
}
