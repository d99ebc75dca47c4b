//! The served-job rules, decision by decision, on [`World`].
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use vramfit_api::{Phase, Preference, ReplicaClasses, ServeSpec};

use super::world::{World, reasons, replicas, served_spec};
use crate::fixtures;
use crate::ownership::ObjectWrite;

#[test]
fn three_replicas_fill_the_best_class_then_the_next_each_with_its_plan() {
    let mut spec = served_spec(replicas(3));
    spec.gpus.max = 1;
    // Two L40S nodes and one A10G node, one GPU each.
    let mut world = World::new(
        spec,
        vec![
            fixtures::gpu_node("l-1", "l40s", 1, 1),
            fixtures::gpu_node("l-2", "l40s", 1, 1),
            fixtures::gpu_node("a-1", "a10g", 1, 1),
        ],
    );
    let decision = world.step();
    let names: Vec<String> = decision
        .create_pods
        .iter()
        .map(|(p, _)| p.name_any())
        .collect();
    assert_eq!(names, ["chat-r0-1", "chat-r1-2", "chat-r2-3"]);
    let classes: Vec<&str> = decision
        .create_pods
        .iter()
        .map(|(_, plan)| plan.node_class.as_str())
        .collect();
    assert_eq!(
        classes,
        ["l40s-x1", "l40s-x1", "a10g-x1"],
        "the first class is full"
    );
    // Each with its class's flags: bfloat16 without quantization on the L40S, 8-bit on the A10G.
    assert_eq!(world.flag("chat-r0-1", "--quantization"), None);
    assert_eq!(
        world.flag("chat-r2-3", "--quantization").as_deref(),
        Some("fp8")
    );
    assert_eq!(world.flag("chat-r2-3", "--port").as_deref(), Some("8000"));
    assert_eq!(
        reasons(&decision),
        ["PodCreated", "PodCreated", "PodCreated"]
    );
    assert!(
        matches!(decision.service, ObjectWrite::Create(_)),
        "the Service is created"
    );
    assert!(
        matches!(decision.pdb, ObjectWrite::Create(_)),
        "two replicas or more: a PDB"
    );

    let status = world.job.status.clone().unwrap();
    assert_eq!(status.phase, Some(Phase::Scheduled));
    assert_eq!((status.replicas, status.ready_replicas), (Some(3), Some(0)));
    assert_eq!(status.ready.as_deref(), Some("0/3"));
    assert_eq!(status.endpoint.as_deref(), Some("http://chat.ml.svc:8000"));
    assert_eq!(status.node_class.as_deref(), Some("a10g-x1,l40s-x1"));
    assert_eq!(status.attempt_count, 3, "pods created so far");
    assert_eq!(world.condition("Available").1, "NoReplicaReady");
    assert_eq!(world.condition("Progressing").1, "ReplicasStarting");

    // The replicas turn Ready: Available once, Progressing done, nothing else written.
    world.all_ready();
    let decision = world.step();
    assert!(decision.create_pods.is_empty() && decision.delete_pods.is_empty());
    assert_eq!(reasons(&decision), ["Available"]);
    let status = world.job.status.clone().unwrap();
    assert_eq!(status.phase, Some(Phase::Running));
    assert_eq!(status.ready.as_deref(), Some("3/3"));
    assert_eq!(world.condition("Ready").0, "True");
    assert_eq!(world.condition("Progressing").1, "UpToDate");
    assert_eq!(world.condition("Degraded").0, "False");
    // A decision that learns nothing new changes nothing.
    let again = world.decide();
    assert_eq!(Some(&again.status), world.job.status.as_ref());
    assert!(again.events.is_empty() && again.service == ObjectWrite::Keep);
    assert_eq!(again.pdb, ObjectWrite::Keep);
}

#[test]
fn a_replica_out_of_memory_steps_down_on_its_class_and_the_others_keep_their_plans() {
    let mut world = World::two_classes(served_spec(replicas(2)));
    world.step();
    let before_a10g = world.line(1);
    assert_eq!(before_a10g.node_class, "a10g-x1");
    world.run("chat-r0-1", true);
    world.fail(
        "chat-r1-2",
        "Error",
        1,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    );
    let decision = world.step();
    assert_eq!(decision.delete_pods, ["chat-r1-2"]);
    let (pod, plan) = &decision.create_pods[0];
    assert_eq!(pod.name_any(), "chat-r1-3");
    assert_eq!(plan.node_class, "a10g-x1", "on its class");
    assert_eq!(
        plan.quantization,
        vramfit_api::Quantization::Nf4,
        "one step down: 8-bit → 4-bit"
    );
    // (Replica 0 turned Ready in the same decision.)
    assert_eq!(
        reasons(&decision),
        ["OutOfMemory", "SteppedDown", "PodCreated", "Available"]
    );
    assert_eq!(decision.steps, ["quantization"]);
    assert_eq!(decision.restarts, ["OutOfMemory"]);
    let line = world.line(1);
    assert_eq!(line.restarts, 1);
    assert_eq!(line.failures, 0, "out of memory is no crash loop");
    assert!(line.fallback.is_some());
    assert_eq!(
        world.line(0).pod_name,
        "chat-r0-1",
        "the other replica keeps its pod"
    );
    assert_eq!(world.line(0).fallback, None);
    assert_eq!(world.condition("OutOfMemory").1, "SteppedDown");
    let restart = &world.job.status.as_ref().unwrap().recent_restarts[0];
    assert_eq!((restart.slot, restart.reason.as_str()), (1, "OutOfMemory"));
    assert!(
        restart.step.as_deref().unwrap_or_default().contains("nf4"),
        "{restart:?}"
    );
}

#[test]
fn the_servers_own_out_of_memory_messages_step_down_too() {
    for message in [
        // vLLM at start-up (vllm/v1/core/kv_cache_utils.py).
        "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
        // llama.cpp (src/llama-kv-cache.cpp).
        "llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache",
        // llama.cpp (src/llama-model.cpp load_tensors).
        "llama_model_load: error loading model: unable to allocate CUDA0 buffer",
    ] {
        let mut world = World::two_classes(served_spec(replicas(1)));
        world.step();
        world.fail("chat-r0-1", "Error", 1, message);
        let decision = world.step();
        assert_eq!(
            reasons(&decision)[..2],
            ["OutOfMemory", "SteppedDown"],
            "{message}"
        );
    }
}

#[test]
fn a_crash_after_ready_comes_back_with_the_same_plan_after_a_growing_backoff() {
    let mut world = World::two_classes(served_spec(replicas(1)));
    world.step();
    world.run("chat-r0-1", true);
    world.step();
    let summary = world.line(0).plan_summary.clone();
    let mut waits = Vec::new();
    let mut pod = "chat-r0-1".to_string();
    for round in 1..=4u32 {
        world.fail(&pod, "Error", 139, "Segmentation fault (core dumped)");
        let failed = world.step();
        assert!(
            failed.create_pods.is_empty(),
            "round {round}: no pod before the backoff"
        );
        assert_eq!(reasons(&failed)[0], "ReplicaFailed");
        let line = world.line(0);
        assert_eq!(line.failures, round);
        let Action { .. } = failed.action;
        let wait = crate::backoff::until(&world.now, line.retry_after.as_ref().unwrap());
        waits.push(wait.as_secs());
        // Nothing happens before the time is up.
        world.later(wait.as_secs() - 1);
        assert!(world.step().create_pods.is_empty());
        world.later(1);
        let replaced = world.step();
        assert_eq!(
            replaced.delete_pods,
            [pod.clone()],
            "the failed pod goes with its replacement"
        );
        let (next, _) = &replaced.create_pods[0];
        pod = next.name_any();
        assert_eq!(world.line(0).plan_summary, summary, "the same plan");
        world.run(&pod, true);
        world.step();
    }
    assert_eq!(waits, [10, 20, 40, 80], "exponential");
    assert_eq!(world.condition("Degraded").1, "CrashLoop");
    assert_eq!(world.line(0).restarts, 4);
    // Ten minutes of serving: the failures are forgotten, the job is no longer degraded.
    world.later(600);
    world.step();
    assert_eq!(world.line(0).failures, 0);
    assert_eq!(world.condition("Degraded").0, "False");
}

#[test]
fn a_crash_loop_is_degraded_from_the_third_failure_and_never_requeues_hot() {
    let mut world = World::two_classes(served_spec(replicas(1)));
    world.step();
    let mut pod = "chat-r0-1".to_string();
    for round in 1..=3u32 {
        world.fail(&pod, "Error", 1, "RuntimeError: model not found");
        let decision = world.step();
        let line = world.line(0);
        let wait = crate::backoff::until(&world.now, line.retry_after.as_ref().unwrap());
        assert_eq!(
            decision.action,
            Action::requeue(wait + Duration::from_secs(1)),
            "looked at again when the backoff ends, not before"
        );
        let degraded = world.condition("Degraded");
        if round < 3 {
            assert_eq!(degraded.0, "False");
        } else {
            assert_eq!(
                (degraded.0.as_str(), degraded.1.as_str()),
                ("True", "CrashLoop")
            );
            assert!(reasons(&decision).contains(&"Degraded"));
        }
        world.later(wait.as_secs());
        let replaced = world.step();
        pod = replaced.create_pods[0].0.name_any();
    }
}

#[test]
fn a_disrupted_or_deleted_replica_is_replaced_at_once_with_the_same_plan() {
    let mut world = World::two_classes(served_spec(replicas(1)));
    world.step();
    world.run("chat-r0-1", true);
    world.step();
    // The node was drained (DisruptionTarget).
    let mut evicted = world.pods.remove("chat-r0-1").unwrap();
    evicted = fixtures::as_failed(evicted, "l-1", "Error", 137, "");
    evicted.status.as_mut().unwrap().reason = Some("Evicted".into());
    world.pods.insert("chat-r0-1".into(), evicted);
    let decision = world.step();
    assert_eq!(reasons(&decision), ["Disrupted", "PodCreated"]);
    assert_eq!(decision.create_pods[0].0.name_any(), "chat-r0-2");
    assert_eq!(world.line(0).failures, 0);
    // Deleted behind the operator's back (a node removed with its pods).
    world.pods.remove("chat-r0-2");
    let decision = world.step();
    assert_eq!(decision.restarts, ["Deleted"]);
    assert_eq!(decision.create_pods[0].0.name_any(), "chat-r0-3");
}

#[test]
fn a_replica_refused_at_kubelet_admission_backs_off_and_crash_loops_from_the_third() {
    // A node whose device plugin fails Allocate refuses every pod placed there: each refusal
    // is a failure of the replica, not a disruption replaced at once.
    let mut world = World::two_classes(served_spec(replicas(1)));
    world.step();
    let mut pod = "chat-r0-1".to_string();
    let mut waits = Vec::new();
    for round in 1..=3u32 {
        world.refuse(&pod, "UnexpectedAdmissionError");
        let refused = world.step();
        assert!(
            refused.create_pods.is_empty(),
            "round {round}: no new pod at once"
        );
        assert_eq!(refused.restarts, ["AdmissionRefused"]);
        assert_eq!(reasons(&refused)[0], "AdmissionRefused");
        let line = world.line(0);
        assert_eq!(line.failures, round);
        assert_eq!(line.reason.as_deref(), Some("AdmissionRefused"));
        let wait = crate::backoff::until(&world.now, line.retry_after.as_ref().unwrap());
        assert_eq!(
            refused.action,
            Action::requeue(wait + Duration::from_secs(1)),
            "looked at again when the backoff ends"
        );
        waits.push(wait.as_secs());
        let degraded = world.condition("Degraded");
        if round < 3 {
            assert_eq!(degraded.0, "False", "round {round}");
        } else {
            assert_eq!(
                (degraded.0.as_str(), degraded.1.as_str()),
                ("True", "CrashLoop")
            );
        }
        world.later(wait.as_secs() - 1);
        assert!(world.step().create_pods.is_empty(), "not before the time");
        world.later(1);
        let replaced = world.step();
        assert_eq!(replaced.delete_pods, [pod.clone()]);
        pod = replaced.create_pods[0].0.name_any();
    }
    assert_eq!(waits, [10, 20, 40], "exponential");
    // Out of GPUs at admission (OutOfnvidia.com/gpu) is the same kind of refusal.
    world.refuse(&pod, "OutOfnvidia.com/gpu");
    let refused = world.step();
    assert!(refused.create_pods.is_empty());
    assert_eq!(world.line(0).failures, 4);
}

#[test]
fn a_rolling_update_keeps_a_ready_endpoint_at_every_step() {
    let mut spec = served_spec(replicas(2));
    spec.gpus.max = 1;
    // Room for two replicas and one surge pod.
    let mut world = World::new(
        spec,
        vec![
            fixtures::gpu_node("l-1", "l40s", 1, 1),
            fixtures::gpu_node("l-2", "l40s", 1, 1),
            fixtures::gpu_node("l-3", "l40s", 1, 1),
        ],
    );
    world.step();
    world.all_ready();
    world.step();
    world.job.metadata.generation = Some(2);
    world.job.spec.image = "vllm/vllm-openai:v0.11.0".into();

    let mut deleted = Vec::new();
    for _ in 0..8 {
        let decision = world.step();
        deleted.extend(decision.delete_pods.clone());
        let ready = world.lines().iter().filter(|l| l.ready).count();
        assert!(ready >= 1, "an endpoint at every step: {:?}", world.lines());
        // Surge pods (and replaced ones) become Ready after the decision that created them.
        let new: Vec<String> = decision
            .create_pods
            .iter()
            .map(|(p, _)| p.name_any())
            .collect();
        for name in new {
            world.run(&name, true);
        }
        if world.condition("Progressing").1 == "UpToDate" {
            break;
        }
    }
    assert_eq!(world.condition("Progressing").1, "UpToDate");
    assert_eq!(
        deleted,
        ["chat-r0-1", "chat-r1-2"],
        "each old pod once its surge pod was Ready"
    );
    for line in world.lines() {
        assert!(
            line.updated && line.ready && line.surge.is_none(),
            "{line:?}"
        );
        let image = world.pods[&line.pod_name].spec.as_ref().unwrap().containers[0]
            .image
            .clone();
        assert_eq!(image.as_deref(), Some("vllm/vllm-openai:v0.11.0"));
    }
}

/// A rolled world of two Ready replicas on `nodes` one-GPU L40S nodes, whose spec just changed.
fn rolled_two_replicas(nodes: usize) -> World {
    let mut spec = served_spec(replicas(2));
    spec.gpus.max = 1;
    let nodes = (1..=nodes)
        .map(|n| fixtures::gpu_node(&format!("l-{n}"), "l40s", 1, 1))
        .collect();
    let mut world = World::new(spec, nodes);
    world.step();
    world.all_ready();
    world.step();
    world.job.metadata.generation = Some(2);
    world.job.spec.image = "vllm/vllm-openai:v0.11.0".into();
    world
}

#[test]
fn the_next_surge_pod_starts_with_the_deletion_of_the_replaced_pod_where_room_is_left() {
    // Room for the two replicas and two surge pods.
    let mut world = rolled_two_replicas(4);
    let first = world.step();
    assert_eq!(first.create_pods.len(), 1, "one surge pod at a time");
    let surge = first.create_pods[0].0.name_any();
    world.run(&surge, true);
    let next = world.step();
    assert_eq!(next.delete_pods, ["chat-r0-1"], "the replaced pod goes");
    let created: Vec<String> = next.create_pods.iter().map(|(p, _)| p.name_any()).collect();
    assert_eq!(
        created.len(),
        1,
        "the next replica's surge pod starts in the same step, beside the leaving pod"
    );
    assert_eq!(world.line(1).surge.as_ref().unwrap().pod_name, created[0]);
    assert!(!reasons(&next).contains(&"InPlaceUpdate"));
}

#[test]
fn with_room_only_for_one_surge_pod_the_next_waits_for_the_leaving_pod_not_in_place() {
    // Room for the two replicas and one surge pod: the leaving pod's GPU is the next's.
    let mut world = rolled_two_replicas(3);
    let first = world.step();
    let surge = first.create_pods[0].0.name_any();
    world.run(&surge, true);
    let next = world.step();
    assert_eq!(next.delete_pods, ["chat-r0-1"]);
    assert!(
        next.create_pods.is_empty() && !reasons(&next).contains(&"InPlaceUpdate"),
        "no room beside the leaving pod: the next replica waits, it is not replaced in place"
    );
    assert!(world.line(1).surge.is_none());
    // The pod gone, its GPU takes the next surge pod.
    let after = world.step();
    assert_eq!(after.create_pods.len(), 1);
    assert!(world.line(1).surge.is_some());
}

#[test]
fn with_no_room_for_a_surge_pod_a_replica_is_replaced_in_place_while_another_serves() {
    let mut spec = served_spec(replicas(2));
    spec.gpus.max = 1;
    let mut world = World::new(
        spec,
        vec![
            fixtures::gpu_node("l-1", "l40s", 1, 1),
            fixtures::gpu_node("l-2", "l40s", 1, 1),
        ],
    );
    world.step();
    world.all_ready();
    world.step();
    world.job.metadata.generation = Some(2);
    world.job.spec.image = "vllm/vllm-openai:v0.11.0".into();
    let decision = world.step();
    assert_eq!(decision.delete_pods, ["chat-r0-1"]);
    assert_eq!(decision.create_pods.len(), 1);
    assert!(
        reasons(&decision).contains(&"InPlaceUpdate"),
        "{:?}",
        reasons(&decision)
    );
    assert!(world.line(1).ready, "the other replica serves meanwhile");
    // Its replacement is not Ready yet: the second replica waits (it is the only Ready one).
    let decision = world.step();
    assert!(decision.delete_pods.is_empty() && decision.create_pods.is_empty());
    assert!(world.line(1).message.unwrap().contains("only Ready one"));
    let new = world.line(0).pod_name;
    world.run(&new, true);
    let decision = world.step();
    assert_eq!(decision.delete_pods, ["chat-r1-2"]);
}

#[test]
fn a_single_replica_with_no_room_is_replaced_in_place_and_says_so() {
    let mut world = World::new(
        served_spec(replicas(1)),
        vec![fixtures::gpu_node("l-1", "l40s", 1, 1)],
    );
    world.step();
    world.all_ready();
    world.step();
    world.job.metadata.generation = Some(2);
    world.job.spec.image = "vllm/vllm-openai:v0.11.0".into();
    let decision = world.step();
    assert_eq!(decision.delete_pods, ["chat-r0-1"]);
    let event = decision
        .events
        .iter()
        .find(|e| e.reason.as_str() == "InPlaceUpdate")
        .expect("an InPlaceUpdate event");
    assert!(event.warning);
    assert!(event.note.contains("no Ready replica"), "{}", event.note);
}

#[test]
fn a_label_change_is_applied_to_the_running_pods_without_a_restart() {
    let mut world = World::two_classes(served_spec(replicas(1)));
    world.step();
    world.all_ready();
    world.step();
    world.job.metadata.generation = Some(2);
    world.job.spec.pod = Some(vramfit_api::PodTemplate {
        labels: [("team".to_string(), "chat".to_string())].into(),
        ..Default::default()
    });
    let decision = world.step();
    assert!(decision.create_pods.is_empty() && decision.delete_pods.is_empty());
    assert_eq!(decision.apply_pods.len(), 1);
    assert_eq!(decision.apply_pods[0].labels()["team"], "chat");
    assert_eq!(world.condition("Progressing").1, "UpToDate");
}

#[test]
fn scaling_down_removes_the_replicas_the_preference_ranks_worst() {
    for (preference, removed_class) in [
        (Preference::Economy, "l40s-x1"), // 1.80 $/h, the most expensive
        (Preference::Quality, "a10g-x1"), // 8-bit, the most quantized
    ] {
        let mut spec = served_spec(replicas(2));
        spec.preference = preference;
        let mut world = World::two_classes(spec);
        world.step();
        world.all_ready();
        world.step();
        world.job.spec.serve.as_mut().unwrap().replicas = 1;
        let decision = world.step();
        assert_eq!(decision.delete_pods.len(), 1);
        let removed = &decision.delete_pods[0];
        assert!(reasons(&decision).contains(&"ScaledDown"));
        assert!(
            matches!(decision.pdb, ObjectWrite::Delete { ref name, .. } if name == "chat"),
            "below two replicas"
        );
        let kept = world.line(world.lines()[0].slot);
        assert_ne!(
            kept.node_class, removed_class,
            "{preference:?} removed {removed}"
        );
        assert_eq!(
            world.job.status.as_ref().unwrap().ready.as_deref(),
            Some("1/1")
        );
    }
}

#[test]
fn single_class_replicas_wait_for_room_on_their_class_and_are_woken() {
    let serve = ServeSpec {
        replicas: 2,
        replica_classes: ReplicaClasses::Single,
        ..ServeSpec::default()
    };
    let mut world = World::two_classes(served_spec(serve));
    let decision = world.step();
    assert_eq!(decision.create_pods.len(), 1, "the L40S class has one GPU");
    assert!(decision.waits_for_room);
    assert_eq!(decision.action, Action::requeue(Duration::from_secs(300)));
    assert_eq!(world.condition("Scheduled").1, "NoClassFits");
    assert_eq!(world.condition("Degraded").1, "NoClassFits");
    assert_eq!(world.job.status.as_ref().unwrap().replicas, Some(1));
    // Mixed: the second replica would have gone to the A10G class.
    let mut mixed = World::two_classes(served_spec(replicas(2)));
    assert_eq!(mixed.step().create_pods.len(), 2);
}

#[test]
fn scale_to_zero_removes_every_replica_and_the_budget() {
    let mut world = World::two_classes(served_spec(replicas(2)));
    world.step();
    world.job.spec.serve.as_mut().unwrap().replicas = 0;
    let decision = world.step();
    assert_eq!(decision.delete_pods.len(), 2);
    assert!(matches!(decision.pdb, ObjectWrite::Delete { ref name, .. } if name == "chat"));
    let status = world.job.status.clone().unwrap();
    assert_eq!(status.phase, Some(Phase::Pending));
    assert_eq!(status.ready.as_deref(), Some("0/0"));
    assert_eq!(world.condition("Available").1, "ScaledToZero");
}

#[test]
fn the_restart_history_is_bounded_however_long_a_server_lives() {
    let mut world = World::two_classes(served_spec(replicas(1)));
    world.step();
    let mut pod = "chat-r0-1".to_string();
    for _ in 0..40 {
        // Evicted: replaced at once, no backoff to wait for.
        world.fail(&pod, "Error", 137, "");
        let mut failed = world.pods.remove(&pod).unwrap();
        failed.status.as_mut().unwrap().reason = Some("Evicted".into());
        world.pods.insert(pod.clone(), failed);
        let decision = world.step();
        pod = decision.create_pods[0].0.name_any();
    }
    let status = world.job.status.clone().unwrap();
    assert_eq!(status.recent_restarts.len(), 10);
    assert_eq!(status.replica_statuses[0].restarts, 40);
    assert_eq!(
        status.recent_restarts.last().unwrap().pod_name,
        "chat-r0-40"
    );
    let size = serde_json::to_vec(&status).unwrap().len();
    assert!(size < 16 * 1024, "status stays small: {size} bytes");
}

#[test]
fn a_pod_created_before_a_lost_status_write_is_adopted_not_duplicated() {
    let mut world = World::two_classes(served_spec(replicas(1)));
    let first = world.decide();
    // The pod was created; the status write did not land.
    for (pod, _) in &first.create_pods {
        world
            .pods
            .insert(pod.name_any(), fixtures::created(pod.clone()));
    }
    let again = world.step();
    assert!(
        again.create_pods.is_empty(),
        "adopted: {:?}",
        again.create_pods
    );
    assert!(again.delete_pods.is_empty());
    assert_eq!(world.line(0).pod_name, "chat-r0-1");
    assert_eq!(world.job.status.as_ref().unwrap().attempt_count, 1);
}

#[test]
fn a_pod_the_job_controls_that_no_replica_holds_is_deleted() {
    let mut world = World::two_classes(served_spec(replicas(1)));
    world.step();
    // A replica pod left over from a scale-down the status never recorded.
    let mut stray = world.pods["chat-r0-1"].clone();
    stray.metadata.name = Some("chat-r5-9".into());
    world.pods.insert("chat-r5-9".into(), stray);
    let decision = world.step();
    assert_eq!(decision.delete_pods, ["chat-r5-9"]);
}

#[test]
fn an_invalid_spec_touches_no_pod_and_says_why() {
    let mut world = World::two_classes(served_spec(replicas(1)));
    world.step();
    world.run("chat-r0-1", true);
    world.job.metadata.generation = Some(2);
    world.job.spec.args.push("--port=9000".into());
    let decision = world.step();
    assert!(decision.create_pods.is_empty() && decision.delete_pods.is_empty());
    let invalid = world.condition("InvalidSpec");
    assert_eq!(invalid.0, "True");
    assert!(invalid.2.contains("serve.port"), "{}", invalid.2);
    assert_eq!(reasons(&decision), ["InvalidSpec", "Available"]);
    assert!(world.line(0).ready, "the replica keeps serving");
}

/// A Service of the job's name that is not the job's — here one an earlier job of the same
/// name left, labelled — is never applied onto: the decision only creates (which the API
/// server refuses; the apply step reports it, `api.rs`).
#[test]
fn a_foreign_service_of_the_jobs_name_is_only_ever_created() {
    let mut world = World::two_classes(served_spec(replicas(1)));
    let mut foreign = crate::replicas::service::desired_service(
        &world.job,
        world.job.spec.serve.as_ref().unwrap(),
    )
    .unwrap();
    foreign.metadata.owner_references = None;
    world.service = Some(foreign);
    let decision = world.step();
    assert!(matches!(decision.service, ObjectWrite::Create(_)));
    assert!(
        world
            .service
            .as_ref()
            .unwrap()
            .owner_references()
            .is_empty()
    );
}

/// The budget is sized from the replicas that have a live pod: with room for one of two
/// replicas there is none (a budget counting the waiting replica could never allow the Ready
/// one's eviction); once both have a pod, `minAvailable: 1`; while a failed replica waits for
/// its backoff, none again.
#[test]
fn the_budget_counts_only_replicas_with_a_live_pod() {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let min_available = |world: &World| {
        world
            .pdb
            .as_ref()
            .and_then(|p| p.spec.as_ref())
            .and_then(|s| s.min_available.clone())
    };
    // One L40S×1 node: room for one replica of two.
    let mut world = World::new(
        served_spec(replicas(2)),
        vec![fixtures::gpu_node("l-1", "l40s", 1, 1)],
    );
    let decision = world.step();
    assert_eq!(decision.create_pods.len(), 1);
    assert_eq!(
        decision.pdb,
        ObjectWrite::Keep,
        "one live replica: no budget"
    );
    world.all_ready();
    world.step();
    assert_eq!(world.pdb, None);
    // A second node: the waiting replica is placed, and the budget comes.
    world
        .nodes
        .push(std::sync::Arc::new(fixtures::gpu_node("l-2", "l40s", 1, 1)));
    let decision = world.step();
    assert_eq!(decision.create_pods.len(), 1);
    assert!(matches!(decision.pdb, ObjectWrite::Create(_)));
    assert_eq!(min_available(&world), Some(IntOrString::Int(1)));
    // The new replica fails: while it backs off it has no live pod, and the budget goes.
    world.fail("chat-r1-2", "Error", 1, "Segmentation fault");
    let decision = world.step();
    assert!(decision.create_pods.is_empty(), "backing off");
    assert!(matches!(decision.pdb, ObjectWrite::Delete { .. }));
    assert_eq!(world.pdb, None);
}

#[test]
fn a_served_job_with_no_room_anywhere_is_unschedulable_and_says_why_once() {
    // One A10G×1 node, already taken by another workload.
    let mut world = World::two_classes(served_spec(replicas(2)));
    world.nodes.remove(0);
    let mut other = fixtures::gpu_pod("other", "train", Some("a-1"), 1);
    other.metadata.namespace = Some(fixtures::NAMESPACE.into());
    world.pods.insert("train".into(), other);
    let decision = world.step();
    assert!(decision.create_pods.is_empty());
    let status = world.job.status.clone().unwrap();
    assert_eq!(status.phase, Some(Phase::Unschedulable));
    assert_eq!(status.replicas, Some(0));
    assert_eq!(world.condition("Scheduled").1, "NoClassFits");
    assert!(world.condition("Scheduled").2.contains("no free GPUs"));
    assert_eq!(reasons(&decision), ["Degraded", "Unschedulable"]);
    assert_eq!(decision.action, Action::requeue(Duration::from_secs(300)));
    // Looked at again with nothing new: no event again.
    assert!(world.step().events.is_empty());
}

#[test]
fn a_replica_the_scheduler_never_places_frees_its_class_at_the_schedule_deadline() {
    let mut spec = served_spec(replicas(1));
    spec.schedule_deadline_seconds = Some(120);
    let mut world = World::two_classes(spec);
    world.step();
    let pod = world.lines()[0].pod_name.clone();
    let created = world.now.clone();
    // The scheduler never binds it (a resource no node has).
    let stuck = world.pods.remove(&pod).expect("the pod");
    let mut stuck = fixtures::with_unschedulable_condition(
        fixtures::as_pending(stuck, None),
        "0/2 nodes are available: 2 Insufficient example.com/never.",
    );
    stuck.metadata.creation_timestamp = Some(created);
    world.pods.insert(pod.clone(), stuck);

    world.later(119);
    let waiting = world.step();
    assert!(waiting.delete_pods.is_empty(), "still within the deadline");
    match waiting.action {
        action if action == Action::requeue(Duration::from_secs(1)) => {}
        other => panic!("due again when the deadline ends: {other:?}"),
    }

    world.later(1);
    let overdue = world.step();
    assert_eq!(
        overdue.delete_pods,
        std::slice::from_ref(&pod),
        "it holds its class no more"
    );
    assert!(overdue.create_pods.is_empty(), "the replacement backs off");
    assert_eq!(reasons(&overdue)[0], "ScheduleDeadlineExceeded");
    let line = world.line(0);
    assert!(line.retry_after.is_some());
    let restart = &world.job.status.as_ref().unwrap().recent_restarts[0];
    assert_eq!(restart.reason, "ScheduleTimeout");
    assert!(
        restart.message.starts_with(&format!(
            "pod {pod} was not scheduled to a node within 120 s: Unschedulable: 0/2 nodes"
        )),
        "{}",
        restart.message
    );
}

#[test]
fn a_reconcile_from_a_status_behind_the_last_write_does_not_delete_the_replaced_pod_again() {
    let mut world = rolled_two_replicas(4);
    let first = world.step();
    let surge = first.create_pods[0].0.name_any();
    world.run(&surge, true);
    let before = world.job.status.clone();
    let next = world.step();
    assert_eq!(
        next.delete_pods,
        ["chat-r0-1"],
        "the replaced pod goes once"
    );
    // The job cache still holds the status before that write (under load it lags): the
    // same surge pod is Ready, the replaced pod is gone.
    world.job.status = before;
    let again = world.decide();
    assert!(
        again.delete_pods.is_empty(),
        "the replaced pod is not deleted again: {:?}",
        again.delete_pods
    );
}
