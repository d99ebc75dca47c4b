//! The state machine, from fixtures, with no API: first attempt, following the pod, the
//! failure ladder, capacity, spec changes, adoption.
use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use vramfit_api::{InferenceJob, Phase, Plan};
use vramfit_planner::resolve_job;

use super::*;
use crate::capacity::{PodConstraints, build_inventory};
use crate::fixtures;
use crate::stores::gpu_usage::gpu_usage;
use vramfit_api::AttemptOutcome;
use vramfit_api::conditions::{self, ConditionType};
use vramfit_api::pod_keys::{ATTEMPT_LABEL, CONTAINER_NAME};

fn at(seconds: i64) -> Time {
    Time(Timestamp::from_second(seconds).unwrap())
}

/// A cluster as the stores would show it.
#[derive(Default)]
struct World {
    nodes: Vec<Arc<Node>>,
    gpu_pods: Vec<Arc<Pod>>,
    job_pods: HashMap<String, Arc<Pod>>,
    applied: HashMap<String, Arc<Plan>>,
    now: i64,
}

impl World {
    fn with_nodes(nodes: Vec<Node>) -> Self {
        Self {
            nodes: nodes.into_iter().map(Arc::new).collect(),
            now: 100,
            ..Self::default()
        }
    }

    fn decide(&self, job: &InferenceJob) -> Decision {
        let input = resolve_job(&job.spec);
        let inventory = build_inventory(&self.nodes, &[]);
        let pods = |name: &str| match (self.job_pods.get(name), self.applied.get(name)) {
            (Some(pod), _) => PodSeen::Observed(pod.clone()),
            (None, Some(plan)) => PodSeen::Applied(plan.clone()),
            (None, None) => PodSeen::Absent,
        };
        let capacity = || {
            Capacity::compute(
                &inventory,
                &gpu_usage(&self.gpu_pods),
                &[],
                &PodConstraints::of_job(job),
                &|_| true,
            )
        };
        let observed = Observed {
            job,
            input: &input,
            pods: &pods,
            inventory: &inventory,
            capacity: &capacity,
            now: at(self.now),
            model_cache: &crate::model_cache::view::LazyView::none(),
        };
        next_status(&observed, &Requeues::default()).unwrap()
    }

    /// Puts the decision's pod into the store, in `state`.
    fn observe(&mut self, decision: &Decision, state: impl Fn(Pod) -> Pod) -> String {
        let pod = decision.apply_pod.clone().expect("a pod was applied");
        let name = pod.metadata.name.clone().unwrap();
        self.job_pods
            .insert(name.clone(), Arc::new(state(fixtures::created(pod))));
        name
    }

    fn set_pod(&mut self, name: &str, state: impl Fn(Pod) -> Pod) {
        let pod = (*self.job_pods[name]).clone();
        self.job_pods.insert(name.to_string(), Arc::new(state(pod)));
    }
}

/// The job after its status write.
fn written(job: &InferenceJob, decision: &Decision) -> InferenceJob {
    let mut job = job.clone();
    job.status = Some(decision.status.clone());
    job
}

fn reasons(decision: &Decision) -> Vec<&'static str> {
    decision.events.iter().map(|e| e.reason.as_str()).collect()
}

fn condition<'a>(decision: &'a Decision, type_: &str) -> &'a vramfit_api::Condition {
    let type_ = ConditionType::parse(type_).expect("a condition type vramfit sets");
    conditions::get(&decision.status.conditions, type_).unwrap()
}

fn env(pod: &Pod, name: &str) -> Option<String> {
    let c = pod
        .spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == CONTAINER_NAME)?;
    c.env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)?
        .value
        .clone()
}

fn a10g_world() -> World {
    World::with_nodes(vec![fixtures::gpu_node("a-1", "a10g", 4, 4)])
}

#[test]
fn first_reconcile_plans_and_creates_attempt_one() {
    let world = a10g_world();
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let d = world.decide(&job);
    let pod = d.apply_pod.as_ref().unwrap();
    assert_eq!(pod.metadata.name.as_deref(), Some("chat-1"));
    let s = &d.status;
    assert_eq!(s.phase, Some(Phase::Scheduled));
    assert_eq!(s.attempt_count, 1);
    assert_eq!(s.pod_name.as_deref(), Some("chat-1"));
    assert_eq!(s.node_class.as_deref(), Some("a10g-x4"));
    assert_eq!(s.observed_generation, Some(1));
    assert_eq!(s.start_time, Some(at(100)));
    assert_eq!(s.plan.as_ref().unwrap().gpu_count, 1);
    assert!(!s.plan.as_ref().unwrap().reasons.is_empty());
    assert_eq!(s.attempts.len(), 1);
    assert_eq!(s.attempts[0].step, None);
    assert!(
        s.attempts[0]
            .plan_summary
            .starts_with("a10g-x4: 1×GPU bfloat16")
    );
    let types: Vec<_> = s
        .conditions
        .iter()
        .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
        .collect();
    assert_eq!(
        types,
        [
            ("Scheduled", "True", "PodCreated"),
            ("Ready", "False", "PodPending"),
            ("InvalidSpec", "False", "SpecValid"),
            ("OutOfMemory", "False", "NoOutOfMemory")
        ]
    );
    assert!(
        s.conditions
            .iter()
            .all(|c| c.observed_generation == Some(1) && c.last_transition_time == at(100))
    );
    assert_eq!(reasons(&d), ["PodCreated"], "one event per placement");
    let note = &d.events[0].note;
    assert!(
        note.starts_with("pod chat-1 (attempt 1) created: a10g-x4: 1×GPU bfloat16"),
        "the note carries the plan: {note}"
    );
    assert_eq!(d.events[0].pod.as_deref(), Some("chat-1"));
    assert_eq!(d.action, Action::requeue(Requeues::default().resync));
    assert!(d.status_changed(&job));
}

#[test]
fn status_follows_the_pod_and_writes_only_changes() {
    let mut world = a10g_world();
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let first = world.decide(&job);
    let job = written(&job, &first);
    let name = world.observe(&first, |p| p);
    world.now = 200;

    // Pending and unbound: nothing new, nothing written, transition times kept.
    let d = world.decide(&job);
    assert!(!d.status_changed(&job), "{:#?}", d.status);
    assert!(d.apply_pod.is_none() && d.events.is_empty());

    // Bound, nothing else said: the binding alone is not written.
    world.set_pod(&name, |p| fixtures::as_pending(p, Some("a-1")));
    let d = world.decide(&job);
    assert!(!d.status_changed(&job), "{:#?}", d.status);
    assert!(d.events.is_empty());
    assert_eq!(
        condition(&d, "Ready").message,
        "pod chat-1 is not running yet"
    );

    // Bound, pulling the image: the node comes with the reason it waits.
    world.set_pod(&name, |p| {
        fixtures::with_waiting_container(fixtures::as_pending(p, Some("a-1")), "ContainerCreating")
    });
    let d = world.decide(&job);
    assert_eq!(d.status.node_name.as_deref(), Some("a-1"));
    assert_eq!(
        condition(&d, "Ready").message,
        "pod chat-1 waits: ContainerCreating"
    );
    assert_eq!(d.status.phase, Some(Phase::Scheduled));
    assert_eq!(condition(&d, "Scheduled").reason, "PodBound");
    assert_eq!(
        condition(&d, "Scheduled").last_transition_time,
        at(100),
        "still True"
    );
    let job = written(&job, &d);

    // Running.
    world.set_pod(&name, |p| fixtures::as_running(p, "a-1"));
    let d = world.decide(&job);
    assert_eq!(d.status.phase, Some(Phase::Running));
    assert_eq!(condition(&d, "Ready").status, "True");
    assert_eq!(condition(&d, "Ready").last_transition_time, at(200));
    assert_eq!(reasons(&d), ["Running"]);
    let job = written(&job, &d);

    // Succeeded.
    world.now = 300;
    world.set_pod(&name, |p| fixtures::as_succeeded(p, "a-1"));
    let d = world.decide(&job);
    assert_eq!(d.status.phase, Some(Phase::Succeeded));
    assert_eq!(d.status.completion_time, Some(at(300)));
    assert_eq!(
        d.status.attempts[0]
            .outcome
            .as_ref()
            .map(AttemptOutcome::as_str),
        Some("Succeeded")
    );
    assert_eq!(condition(&d, "Ready").reason, "Succeeded");
    assert_eq!(reasons(&d), ["Succeeded"]);
    assert_eq!(d.action, Action::await_change());
    let job = written(&job, &d);

    // Finished is final.
    let d = world.decide(&job);
    assert!(!d.status_changed(&job) && d.apply_pod.is_none() && d.events.is_empty());
}

#[test]
fn cuda_out_of_memory_retries_one_step_down() {
    let mut world = a10g_world();
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let first = world.decide(&job);
    let job = written(&job, &first);
    let name = world.observe(&first, |p| fixtures::as_running(p, "a-1"));
    world.set_pod(&name, |p| {
        fixtures::as_failed(p, "a-1", "Error", 1, CUDA_OOM)
    });
    let d = world.decide(&job);

    let pod = d.apply_pod.as_ref().expect("attempt 2's pod");
    assert_eq!(pod.metadata.name.as_deref(), Some("chat-2"));
    assert_eq!(pod.metadata.labels.as_ref().unwrap()[ATTEMPT_LABEL], "2");
    assert_eq!(
        env(pod, "VRAMFIT_GPU_COUNT").as_deref(),
        Some("2"),
        "quality: one more GPU first"
    );
    let s = &d.status;
    assert_eq!(s.attempt_count, 2);
    assert_eq!(
        s.attempts[0].outcome.as_ref().map(AttemptOutcome::as_str),
        Some("OutOfMemory")
    );
    assert!(
        s.attempts[0]
            .message
            .as_deref()
            .unwrap()
            .contains("CUDA out of memory")
    );
    assert_eq!(s.attempts[1].step.as_deref(), Some("one more GPU: 1 → 2"));
    assert_eq!(s.fallback.as_ref().unwrap().min_gpus, Some(2));
    assert_eq!(s.pod_name.as_deref(), Some("chat-2"));
    assert_eq!(s.phase, Some(Phase::Scheduled));
    assert_eq!(condition(&d, "OutOfMemory").status, "True");
    assert_eq!(condition(&d, "OutOfMemory").reason, "SteppedDown");
    assert_eq!(reasons(&d), ["OutOfMemory", "SteppedDown", "PodCreated"]);
    assert_eq!(d.steps, ["gpus"]);
}

#[test]
fn cuda_oom_message_steps_down_the_tile_ladder_first() {
    let mut world = a10g_world();
    let job = fixtures::job("vision", fixtures::internvl_spec());
    let first = world.decide(&job);
    let tiles = first.status.plan.as_ref().unwrap().max_tiles.unwrap();
    let job = written(&job, &first);
    let name = world.observe(&first, |p| fixtures::as_running(p, "a-1"));
    world.set_pod(&name, |p| {
        fixtures::as_failed(
            p,
            "a-1",
            "Error",
            1,
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        )
    });
    let d = world.decide(&job);
    let pod = d.apply_pod.as_ref().unwrap();
    let next_tiles: u32 = env(pod, "MAX_TILES").unwrap().parse().unwrap();
    assert!(next_tiles < tiles, "{next_tiles} < {tiles}");
    assert_eq!(
        d.status.attempts[0].message.as_deref(),
        Some("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    );
    assert!(
        d.status.attempts[1]
            .step
            .as_deref()
            .unwrap()
            .starts_with("fewer image tiles")
    );
    assert_eq!(d.steps, ["tiles"]);
}

#[test]
fn other_failures_fail_without_retry() {
    let mut world = a10g_world();
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let first = world.decide(&job);
    let job = written(&job, &first);
    let name = world.observe(&first, |p| fixtures::as_running(p, "a-1"));
    world.set_pod(&name, |p| {
        fixtures::as_failed(p, "a-1", "Error", 2, "FileNotFoundError: /models/x")
    });
    let d = world.decide(&job);
    assert!(d.apply_pod.is_none());
    assert_eq!(d.status.phase, Some(Phase::Failed));
    assert_eq!(
        d.status.attempts[0]
            .outcome
            .as_ref()
            .map(AttemptOutcome::as_str),
        Some("Failed")
    );
    let ready = condition(&d, "Ready");
    assert_eq!(ready.reason, "PodFailed");
    assert!(
        ready.message.contains("FileNotFoundError: /models/x"),
        "{}",
        ready.message
    );
    assert_eq!(condition(&d, "OutOfMemory").status, "False");
    assert_eq!(reasons(&d), ["Failed"]);
    assert_eq!(d.action, Action::await_change());
}

#[test]
fn the_ladder_ends_when_attempts_run_out() {
    let mut world = a10g_world();
    let mut spec = fixtures::vllm_mistral_spec();
    spec.max_attempts = 2;
    let mut job = fixtures::job("chat", spec);
    let oom = |p: Pod| {
        fixtures::as_failed(
            p,
            "a-1",
            "Error",
            1,
            "RuntimeError: CUDA error: out of memory",
        )
    };
    for attempt in 1..=2 {
        let d = world.decide(&job);
        assert_eq!(d.status.attempt_count, attempt);
        job = written(&job, &d);
        world.observe(&d, oom);
    }
    let d = world.decide(&job);
    assert!(d.apply_pod.is_none(), "no third pod");
    assert_eq!(d.status.phase, Some(Phase::Failed));
    assert_eq!(d.status.attempts.len(), 2);
    assert!(
        d.status
            .attempts
            .iter()
            .all(|a| a.outcome.as_ref().map(AttemptOutcome::as_str) == Some("OutOfMemory"))
    );
    let oom_condition = condition(&d, "OutOfMemory");
    assert_eq!(oom_condition.reason, "AttemptsExhausted");
    assert!(
        oom_condition
            .message
            .contains("all 2 attempts are used: RuntimeError: CUDA error: out of memory"),
        "{}",
        oom_condition.message
    );
    assert_eq!(condition(&d, "Ready").reason, "AttemptsExhausted");
    assert_eq!(reasons(&d), ["OutOfMemory", "Failed"]);
}

#[test]
fn no_step_left_fails() {
    // A job pinned to one GPU with no quantization allowed and flash attention off: nothing
    // is left to give up after an out-of-memory failure.
    let mut world = a10g_world();
    let mut spec = fixtures::vllm_mistral_spec();
    spec.gpus.max = 1;
    spec.allowed_quantizations = Some(vec![vramfit_api::Quantization::None]);
    spec.overrides = Some(vramfit_api::JobOverrides {
        flash_attention: Some(false),
        ..Default::default()
    });
    let job = fixtures::job("chat", spec);
    let first = world.decide(&job);
    let job = written(&job, &first);
    world.observe(&first, |p| {
        fixtures::as_failed(p, "a-1", "Error", 1, CUDA_OOM)
    });
    let d = world.decide(&job);
    assert_eq!(d.status.phase, Some(Phase::Failed));
    assert_eq!(condition(&d, "OutOfMemory").reason, "NoStepLeft");
}

#[test]
fn out_of_memory_without_room_waits_and_then_steps_down_the_same_way() {
    let mut world = a10g_world();
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let first = world.decide(&job);
    let job = written(&job, &first);
    world.observe(&first, |p| {
        fixtures::as_failed(p, "a-1", "Error", 1, CUDA_OOM)
    });
    // Another workload takes three GPUs: the two-GPU step-down has no room.
    world.gpu_pods.push(Arc::new(fixtures::gpu_pod(
        "other",
        "train",
        Some("a-1"),
        3,
    )));
    let d = world.decide(&job);
    assert!(d.apply_pod.is_none());
    assert_eq!(d.status.phase, Some(Phase::Unschedulable));
    assert_eq!(d.status.attempt_count, 1);
    assert_eq!(
        d.status.attempts[0]
            .outcome
            .as_ref()
            .map(AttemptOutcome::as_str),
        Some("OutOfMemory")
    );
    assert_eq!(
        d.status.fallback, None,
        "the step is taken when the attempt starts"
    );
    assert!(
        condition(&d, "OutOfMemory")
            .message
            .contains("waiting for a class with room")
    );
    assert_eq!(reasons(&d), ["OutOfMemory", "Unschedulable"]);
    assert!(d.steps.is_empty());
    assert_eq!(d.action, Action::requeue(Requeues::default().unschedulable));
    let job = written(&job, &d);

    world.gpu_pods.clear();
    let d = world.decide(&job);
    assert_eq!(
        d.apply_pod.as_ref().unwrap().metadata.name.as_deref(),
        Some("chat-2")
    );
    assert_eq!(
        d.status.attempts[1].step.as_deref(),
        Some("one more GPU: 1 → 2")
    );
    assert_eq!(d.status.phase, Some(Phase::Scheduled));
    assert_eq!(d.steps, ["gpus"]);
}

#[test]
fn full_best_class_goes_to_the_next_and_none_free_is_unschedulable() {
    let mut world = World::with_nodes(vec![
        fixtures::gpu_node("h-1", "h100", 8, 8),
        fixtures::gpu_node("a-1", "a10g", 4, 4),
    ]);
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    assert_eq!(
        world.decide(&job).status.node_class.as_deref(),
        Some("h100-80gb-hbm3-x8")
    );

    world
        .gpu_pods
        .push(Arc::new(fixtures::gpu_pod("other", "big", Some("h-1"), 8)));
    let d = world.decide(&job);
    assert_eq!(d.status.node_class.as_deref(), Some("a10g-x4"));
    assert_eq!(
        d.status.rejected_classes.len(),
        1,
        "the passed-over class says why"
    );

    world.gpu_pods.push(Arc::new(fixtures::gpu_pod(
        "other",
        "small",
        Some("a-1"),
        4,
    )));
    let d = world.decide(&job);
    assert_eq!(d.status.phase, Some(Phase::Unschedulable));
    assert!(d.apply_pod.is_none());
    let scheduled = condition(&d, "Scheduled");
    assert_eq!(
        (scheduled.status.as_str(), scheduled.reason.as_str()),
        ("False", "NoClassFits")
    );
    assert!(
        scheduled.message.contains("a10g-x4: no free GPUs"),
        "{}",
        scheduled.message
    );
    assert!(
        scheduled
            .message
            .contains("h100-80gb-hbm3-x8: no free GPUs"),
        "{}",
        scheduled.message
    );
    assert_eq!(d.status.rejected_classes.len(), 2);
    assert_eq!(reasons(&d), ["Unschedulable"]);
}

#[test]
fn invalid_spec_is_reported_once_and_waits() {
    let world = a10g_world();
    let job = fixtures::job("bad", fixtures::invalid_spec());
    let d = world.decide(&job);
    assert_eq!(d.status.phase, Some(Phase::Pending));
    assert!(d.apply_pod.is_none());
    let invalid = condition(&d, "InvalidSpec");
    assert_eq!(invalid.status, "True");
    assert!(
        invalid.message.contains("unknown model preset \"gpt-5\""),
        "{}",
        invalid.message
    );
    assert_eq!(reasons(&d), ["InvalidSpec"]);
    assert_eq!(d.action, Action::await_change());
    let job = written(&job, &d);
    let again = world.decide(&job);
    assert!(!again.status_changed(&job) && again.events.is_empty());
    assert_eq!(again.action, Action::await_change());
}

#[test]
fn a_stored_job_with_a_reserved_pod_annotation_gets_no_pod() {
    // Stored before the CRD refused the key (or with the CRD's rules removed): the operator
    // refuses it too, so the annotation never reaches a pod (from 1.30 the API server would
    // turn it into the container's AppArmor profile).
    let world = a10g_world();
    let mut spec = fixtures::vllm_mistral_spec();
    spec.pod = Some(vramfit_api::PodTemplate {
        annotations: [(
            "container.apparmor.security.beta.kubernetes.io/inference".to_string(),
            "unconfined".to_string(),
        )]
        .into(),
        ..Default::default()
    });
    let d = world.decide(&fixtures::job("unconfined", spec));
    assert!(d.apply_pod.is_none());
    assert_eq!(d.status.phase, Some(Phase::Pending));
    let invalid = condition(&d, "InvalidSpec");
    assert_eq!(invalid.status, "True");
    assert!(
        invalid.message.starts_with(
            "spec.pod.annotations may not set container.apparmor.security.beta.kubernetes.io/inference: "
        ),
        "{}",
        invalid.message
    );
}

#[test]
fn a_spec_change_makes_a_new_pod_only_when_the_pod_changes() {
    let mut world = a10g_world();
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let first = world.decide(&job);
    let mut job = written(&job, &first);
    world.observe(&first, |p| fixtures::as_running(p, "a-1"));

    // A change that leaves the pod as it is (batch size 1 → 1, say a label on the job).
    job.metadata.generation = Some(2);
    let d = world.decide(&job);
    assert!(d.apply_pod.is_none() && d.delete_pod.is_none());
    assert_eq!(d.status.observed_generation, Some(2));
    let mut job = written(&job, &d);

    // A new image: the pod is replaced by attempt 2.
    job.metadata.generation = Some(3);
    job.spec.image = "vllm/vllm-openai:v0.9.0".into();
    let d = world.decide(&job);
    assert_eq!(d.delete_pod.as_deref(), Some("chat-1"));
    assert_eq!(
        d.apply_pod.as_ref().unwrap().metadata.name.as_deref(),
        Some("chat-2")
    );
    assert_eq!(
        d.status.attempts[0]
            .outcome
            .as_ref()
            .map(AttemptOutcome::as_str),
        Some("Replaced")
    );
    assert!(
        d.status.attempts[1]
            .step
            .as_deref()
            .unwrap()
            .contains("spec change")
    );
    assert_eq!(d.status.observed_generation, Some(3));
}

#[test]
fn a_missing_pod_is_applied_again_under_its_name() {
    let world = a10g_world();
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let first = world.decide(&job);
    let job = written(&job, &first);
    // The store does not show chat-1 (deleted out of band) and this process did not apply it.
    let d = world.decide(&job);
    let again = d.apply_pod.as_ref().unwrap();
    assert_eq!(again.metadata.name.as_deref(), Some("chat-1"));
    assert_eq!(again.spec, first.apply_pod.as_ref().unwrap().spec);
    assert_eq!(d.status.attempt_count, 1);
}

#[test]
fn a_pod_applied_before_a_lost_status_write_is_adopted() {
    let mut world = a10g_world();
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let first = world.decide(&job);
    world.observe(&first, |p| p);
    // The status write never landed: the job still has no status. Another workload now fills
    // the class, so planning again would give a different answer; the pod's plan is adopted.
    world.gpu_pods.push(Arc::new(fixtures::gpu_pod(
        "other",
        "train",
        Some("a-1"),
        4,
    )));
    let d = world.decide(&job);
    assert!(d.apply_pod.is_none(), "no second pod, no re-apply");
    assert_eq!(d.status.pod_name.as_deref(), Some("chat-1"));
    assert_eq!(d.status.plan, first.status.plan);

    // Same within this process, before the watch shows the pod.
    let mut world = a10g_world();
    world.applied.insert(
        "chat-1".into(),
        Arc::new(first.status.plan.clone().unwrap()),
    );
    let d = world.decide(&job);
    assert!(d.apply_pod.is_none());
    assert_eq!(d.status.attempt_count, 1);
}

#[test]
fn every_example_is_placed_or_says_why() {
    // The e2e suite's simulated cluster: V100×4, A10G×1, A10G×4, H100×8, and a CPU node.
    let world = World::with_nodes(vec![
        fixtures::gpu_node("v100-4", "v100", 4, 4),
        fixtures::gpu_node("a10g-1", "a10g", 1, 1),
        fixtures::gpu_node("a10g-4", "a10g", 4, 4),
        fixtures::gpu_node("h100-8", "h100", 8, 8),
        fixtures::cpu_node("cpu"),
    ]);
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    let mut placed = 0;
    for path in paths
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
    {
        let text = std::fs::read_to_string(path).unwrap();
        for document in serde_yaml::Deserializer::from_str(&text) {
            let mut job: InferenceJob = serde::Deserialize::deserialize(document)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            job.metadata.uid = Some(fixtures::uid(&job.metadata.name.clone().unwrap()));
            job.metadata.generation = Some(1);
            let d = world.decide(&job);
            let name = path.display();
            match d.status.phase {
                Some(Phase::Scheduled) => {
                    placed += 1;
                    let pod = d
                        .apply_pod
                        .as_ref()
                        .unwrap_or_else(|| panic!("{name}: no pod"));
                    let plan = d.status.plan.as_ref().unwrap();
                    assert_eq!(
                        env(pod, "VRAMFIT_NODE_CLASS").as_deref(),
                        Some(plan.node_class.as_str()),
                        "{name}"
                    );
                    if job.spec.dtype == vramfit_api::DtypeRequest::Bfloat16 {
                        assert!(
                            !plan.node_class.starts_with("v100"),
                            "{name}: bf16 pinned on a V100"
                        );
                    }
                }
                Some(Phase::Unschedulable) => {
                    assert!(d.apply_pod.is_none(), "{name}");
                    assert!(!d.status.rejected_classes.is_empty(), "{name}: says why");
                }
                other => panic!("{name}: {other:?} {:#?}", d.status.conditions),
            }
        }
    }
    assert!(placed > 0, "no example was placed");
}

/// `pod`, failed because the kubelet evicted it (not the workload's fault).
fn as_evicted(pod: Pod) -> Pod {
    let mut pod = fixtures::as_failed(pod, "a-1", "Error", 137, "");
    if let Some(status) = pod.status.as_mut() {
        status.reason = Some("Evicted".to_string());
        status.message = Some("The node was low on resource: memory.".to_string());
    }
    pod
}

#[test]
fn a_pod_kubernetes_ended_runs_again_with_the_same_plan() {
    let mut world = a10g_world();
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let first = world.decide(&job);
    let job = written(&job, &first);
    let name = world.observe(&first, |p| fixtures::as_running(p, "a-1"));
    world.set_pod(&name, as_evicted);

    let d = world.decide(&job);
    let pod = d.apply_pod.as_ref().expect("a new pod");
    assert_eq!(pod.metadata.name.as_deref(), Some("chat-2"));
    assert_eq!(d.status.phase, Some(Phase::Scheduled));
    assert_eq!(
        d.status.attempts[0]
            .outcome
            .as_ref()
            .map(AttemptOutcome::as_str),
        Some("Disrupted")
    );
    assert!(
        d.status.attempts[0]
            .message
            .as_deref()
            .unwrap()
            .starts_with("Evicted")
    );
    assert_eq!(
        d.status.plan, first.status.plan,
        "no step down: the plan did not fail"
    );
    assert!(
        d.status.attempts[1]
            .step
            .as_deref()
            .unwrap()
            .starts_with("same plan again")
    );
    assert_eq!(condition(&d, "OutOfMemory").status, "False");
    assert_eq!(reasons(&d)[0], "Disrupted");
}

#[test]
fn disruptions_also_end_when_attempts_run_out() {
    let mut world = a10g_world();
    let mut spec = fixtures::vllm_mistral_spec();
    spec.max_attempts = 1;
    let job = fixtures::job("chat", spec);
    let first = world.decide(&job);
    let job = written(&job, &first);
    world.observe(&first, as_evicted);
    let d = world.decide(&job);
    assert!(d.apply_pod.is_none());
    assert_eq!(d.status.phase, Some(Phase::Failed));
    assert_eq!(condition(&d, "Ready").reason, "AttemptsExhausted");
}

/// `pod`, refused by the kubelet of `a-1` at admission (its device plugin's Allocate failed).
fn as_refused(pod: Pod) -> Pod {
    let mut pod = fixtures::as_pending(pod, Some("a-1"));
    if let Some(status) = pod.status.as_mut() {
        status.phase = Some("Failed".to_string());
        status.reason = Some("UnexpectedAdmissionError".to_string());
        status.message = Some(
            "Allocate failed due to rpc error: code = Unknown desc = device plugin failed"
                .to_string(),
        );
    }
    pod
}

#[test]
fn a_pod_refused_at_kubelet_admission_runs_again_only_after_a_growing_backoff() {
    let mut world = a10g_world();
    let mut spec = fixtures::vllm_mistral_spec();
    spec.max_attempts = 4;
    let mut job = fixtures::job("chat", spec);
    let first = world.decide(&job);
    job = written(&job, &first);
    let mut pod = world.observe(&first, as_refused);
    // 10 s after the first refusal in a row, doubling.
    for (attempt, wait) in [(1u32, 10u64), (2, 20), (3, 40)] {
        // Seen refused: the attempt ends, and no pod follows at once.
        let refused = world.decide(&job);
        assert!(
            refused.apply_pod.is_none(),
            "attempt {attempt}: no pod at once"
        );
        let ended = &refused.status.attempts[attempt as usize - 1];
        assert_eq!(ended.outcome, Some(AttemptOutcome::AdmissionRefused));
        assert_eq!(ended.end_time, Some(at(world.now)));
        assert!(
            ended
                .message
                .as_deref()
                .unwrap()
                .starts_with("UnexpectedAdmissionError: Allocate failed")
        );
        assert_eq!(reasons(&refused), ["AdmissionRefused"]);
        assert_eq!(refused.status.phase, Some(Phase::Pending));
        let scheduled = condition(&refused, "Scheduled");
        assert_eq!(
            (scheduled.status.as_str(), scheduled.reason.as_str()),
            ("False", "AdmissionRefused")
        );
        assert!(
            scheduled.message.contains(&format!("({attempt} in a row)")),
            "{}",
            scheduled.message
        );
        assert!(
            scheduled.message.contains(&format!("({wait} s backoff)")),
            "{}",
            scheduled.message
        );
        assert_eq!(
            refused.action,
            Action::requeue(Duration::from_secs(wait + 1)),
            "attempt {attempt}: looked at again when the backoff ends"
        );
        job = written(&job, &refused);
        // Not before the backoff is over: nothing changes, nothing is written.
        world.now += i64::try_from(wait).unwrap() - 1;
        let early = world.decide(&job);
        assert!(early.apply_pod.is_none());
        assert!(!early.status_changed(&job), "nothing new to write");
        world.now += 1;
        let next = world.decide(&job);
        let new_pod = next.apply_pod.as_ref().expect("the next attempt's pod");
        assert_eq!(
            new_pod.metadata.name.as_deref(),
            Some(format!("chat-{}", attempt + 1).as_str())
        );
        assert_eq!(next.status.plan, first.status.plan, "the same plan");
        assert_eq!(next.status.phase, Some(Phase::Scheduled));
        job = written(&job, &next);
        pod = world.observe(&next, as_refused);
    }
    // The fourth refusal uses the last attempt: the job fails and says why.
    let last = world.decide(&job);
    assert!(last.apply_pod.is_none());
    assert_eq!(last.status.phase, Some(Phase::Failed));
    let ready = condition(&last, "Ready");
    assert_eq!(ready.reason, "AttemptsExhausted");
    assert!(
        ready
            .message
            .contains("refused by the kubelet at admission"),
        "{}",
        ready.message
    );
    assert_eq!(pod, "chat-4");
}

#[test]
fn an_evicted_pod_is_still_replaced_at_once_after_a_refusal() {
    let mut world = a10g_world();
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let first = world.decide(&job);
    let job = written(&job, &first);
    world.observe(&first, as_refused);
    let refused = world.decide(&job);
    let job = written(&job, &refused);
    world.now += 11;
    let second = world.decide(&job);
    let job = written(&job, &second);
    world.observe(&second, |p| as_evicted(fixtures::as_running(p, "a-1")));
    let evicted = world.decide(&job);
    assert_eq!(
        evicted
            .apply_pod
            .as_ref()
            .and_then(|p| p.metadata.name.as_deref()),
        Some("chat-3"),
        "an eviction is replaced at once"
    );
    assert_eq!(reasons(&evicted)[0], "Disrupted");
}

const CUDA_OOM: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB";

#[test]
fn oom_killed_fails_at_once_naming_host_memory_with_no_gpu_step() {
    let mut world = a10g_world();
    let job = fixtures::job("chat", fixtures::vllm_mistral_spec());
    let first = world.decide(&job);
    let job = written(&job, &first);
    let name = world.observe(&first, |p| fixtures::as_running(p, "a-1"));
    world.set_pod(&name, |p| {
        fixtures::as_failed(p, "a-1", "OOMKilled", 137, "")
    });
    let d = world.decide(&job);
    assert!(d.apply_pod.is_none(), "no second attempt");
    assert_eq!(d.status.phase, Some(Phase::Failed));
    assert_eq!(
        d.status.attempts[0]
            .outcome
            .as_ref()
            .map(AttemptOutcome::as_str),
        Some("HostOutOfMemory")
    );
    assert_eq!(
        d.status.fallback, first.status.fallback,
        "no step down taken"
    );
    let ready = condition(&d, "Ready");
    assert_eq!(ready.reason, "HostOutOfMemory");
    assert!(
        ready.message.contains("spec.pod.resources"),
        "{}",
        ready.message
    );
    assert_eq!(condition(&d, "OutOfMemory").reason, "HostOutOfMemory");
}

#[test]
fn a_shell_command_sets_flags_unreachable_and_a_plain_one_does_not() {
    let world = a10g_world();
    let mut spec = fixtures::vllm_mistral_spec();
    spec.command = vec![
        "sh".into(),
        "-c".into(),
        "exec vllm serve m $VRAMFIT_RUNTIME_ARGS".into(),
    ];
    let d = world.decide(&fixtures::job("shell", spec));
    let c = condition(&d, "FlagsUnreachable");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", "ShellCommand")
    );
    assert!(c.message.contains("VRAMFIT_RUNTIME_ARGS"), "{}", c.message);
    let plain = world.decide(&fixtures::job("plain", fixtures::vllm_mistral_spec()));
    assert!(
        plain
            .status
            .conditions
            .iter()
            .all(|c| c.type_ != "FlagsUnreachable"),
        "{:?}",
        plain.status.conditions
    );
}

const GARBAGE: &str = r#"vramfit.io/v1 {"kind":"OutputCheckFailed","check":"degenerate-output","pattern":"exclamation","ratio":0.97,"threshold":0.3,"dtype":"bfloat16","samples":8}"#;

#[test]
fn garbage_output_without_room_waits_and_then_starts_in_float16() {
    let mut world = World::with_nodes(vec![fixtures::gpu_node("a-1", "a10g", 1, 1)]);
    let job = fixtures::job("chat", fixtures::internvl_spec());
    let first = world.decide(&job);
    let job = written(&job, &first);
    world.observe(&first, |p| {
        fixtures::as_failed(p, "a-1", "Error", 3, GARBAGE)
    });
    // Another workload takes the GPU: the float16 attempt has no room yet.
    world.gpu_pods.push(Arc::new(fixtures::gpu_pod(
        "other",
        "train",
        Some("a-1"),
        1,
    )));
    let d = world.decide(&job);
    assert_eq!(d.status.phase, Some(Phase::Unschedulable));
    assert_eq!(
        d.status.attempts[0]
            .outcome
            .as_ref()
            .map(AttemptOutcome::as_str),
        Some("BadOutput")
    );
    assert_eq!(
        d.bad_outputs,
        [("a10g-x1".to_string(), "bfloat16".to_string())]
    );
    let job = written(&job, &d);

    // The recorded outcome is resumed as garbage output, not as an ordinary failure.
    world.gpu_pods.clear();
    let d = world.decide(&job);
    let pod = d.apply_pod.as_ref().expect("attempt 2 starts");
    assert_eq!(env(pod, "TORCH_DTYPE").as_deref(), Some("float16"));
    assert_eq!(
        d.status.attempts[1].step.as_deref(),
        Some("float16 instead of bfloat16")
    );
    assert!(d.bad_outputs.is_empty(), "counted once, when it happened");
}
