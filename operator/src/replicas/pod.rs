//! The pod of one replica (pure): the batch pod of the plan ([`desired_pod`]: env contract,
//! flags, GPUs, affinity, security context) made a server — its name and labels, the
//! container port, and the startup, readiness and liveness probes on the health route.
//!
//! `restartPolicy` stays `Never`: a replica's container that ends is replaced by a new pod
//! that vramfit plans (one step down after out of memory, after a backoff after a crash), not
//! restarted in place by the kubelet with the plan that just failed (docs/serving.md).
use k8s_openapi::api::core::v1::{
    ContainerPort, HTTPGetAction, Lifecycle, LifecycleHandler, Pod, Probe, SleepAction,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use vramfit_api::pod_keys::{
    ATTEMPT_LABEL, JOB_UID_LABEL, REPLICA_LABEL, SPEC_HASH_ANNOTATION, replica_pod_name,
};
use vramfit_api::{InferenceJob, Plan, ServeSpec};
use vramfit_planner::{JobInput, NodeClass};

use super::service::{PORT_NAME, selector};
use crate::pod::build::{BuildError, desired_pod, spec_hash};

/// Seconds between two startup probes; the model-load budget is a number of them.
pub const STARTUP_PERIOD_SECONDS: i32 = 10;
/// Readiness: every 10 s; out of the endpoints after 3 failures in a row.
pub const READINESS_PERIOD_SECONDS: i32 = 10;
/// Liveness: every 20 s; ended after 6 failures in a row (2 minutes), so that a server that
/// is only busy answering long generations is not killed.
pub const LIVENESS_PERIOD_SECONDS: i32 = 20;
/// Liveness failures in a row that end a replica.
pub const LIVENESS_FAILURES: i32 = 6;
/// How long one probe waits for an answer.
pub const PROBE_TIMEOUT_SECONDS: i32 = 5;
/// How long a deleted replica keeps serving before its server is told to stop (a `preStop`
/// sleep): the endpoint controllers and kube-proxy (or a load balancer) take a moment to stop
/// sending it new connections, and a server that stops at once refuses those (seen on a real
/// kubelet: a connection refused through the ClusterIP in a rolling update without it).
pub const DRAIN_SECONDS: i64 = 5;

/// The pod number `number` of replica `slot` of a served `job`, running `plan` on `class`.
pub fn replica_pod(
    job: &InferenceJob,
    input: &JobInput,
    serve: &ServeSpec,
    plan: &Plan,
    class: &NodeClass,
    (slot, number): (u32, u32),
) -> Result<Pod, BuildError> {
    let mut pod = desired_pod(job, input, plan, class, number)?;
    let job_name = job
        .metadata
        .name
        .clone()
        .ok_or(BuildError::MissingObjectKey("metadata.name"))?;
    pod.metadata.name = Some(replica_pod_name(&job_name, slot, number));
    let labels = pod.metadata.labels.get_or_insert_default();
    labels.remove(ATTEMPT_LABEL);
    labels.extend(selector(job)?);
    labels.insert(REPLICA_LABEL.to_string(), slot.to_string());
    debug_assert!(labels.contains_key(JOB_UID_LABEL));

    let health = serve
        .health_path_for(job.spec.runtime)
        .unwrap_or("/health")
        .to_string();
    let spec = pod
        .spec
        .as_mut()
        .ok_or(BuildError::MissingObjectKey("spec"))?;
    for container in &mut spec.containers {
        container.ports = Some(vec![ContainerPort {
            name: Some(PORT_NAME.to_string()),
            container_port: i32::from(serve.port),
            protocol: Some("TCP".to_string()),
            ..ContainerPort::default()
        }]);
        container.startup_probe = Some(probe(
            &health,
            STARTUP_PERIOD_SECONDS,
            startup_failures(serve.model_load_timeout()),
        ));
        container.readiness_probe = Some(probe(&health, READINESS_PERIOD_SECONDS, 3));
        container.liveness_probe = Some(probe(&health, LIVENESS_PERIOD_SECONDS, LIVENESS_FAILURES));
        // The kubelet sleeps, not the container: distroless server images have no `sleep`.
        container.lifecycle = Some(Lifecycle {
            pre_stop: Some(LifecycleHandler {
                sleep: Some(SleepAction {
                    seconds: DRAIN_SECONDS,
                }),
                ..LifecycleHandler::default()
            }),
            ..Lifecycle::default()
        });
    }
    // The hash covers the server's probes and port too: a new health path or port rolls the
    // replicas.
    let hash = spec_hash(spec)?;
    pod.metadata
        .annotations
        .get_or_insert_default()
        .insert(SPEC_HASH_ANNOTATION.to_string(), hash);
    Ok(pod)
}

/// Startup probe failures that make up a model-load budget of `seconds` (rounded up).
pub fn startup_failures(seconds: u32) -> i32 {
    let period = STARTUP_PERIOD_SECONDS.unsigned_abs();
    i32::try_from(seconds.div_ceil(period)).unwrap_or(i32::MAX)
}

fn probe(path: &str, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_string()),
            port: IntOrString::String(PORT_NAME.to_string()),
            scheme: Some("HTTP".to_string()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        timeout_seconds: Some(PROBE_TIMEOUT_SECONDS),
        failure_threshold: Some(failures),
        success_threshold: Some(1),
        ..Probe::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use crate::pod::build::recorded_spec_hash;
    use kube::ResourceExt;
    use vramfit_api::Fallback;
    use vramfit_planner::{plan_for_class, resolve_job};

    fn served(serve: ServeSpec) -> (InferenceJob, JobInput) {
        let mut spec = fixtures::vllm_mistral_spec();
        spec.serve = Some(serve);
        let job = fixtures::job("chat", spec);
        let input = resolve_job(&job.spec).unwrap();
        (job, input)
    }

    fn build(serve: ServeSpec, slot: u32, number: u32) -> Pod {
        let (job, input) = served(serve.clone());
        let class = fixtures::class("a10g", 4);
        let plan = plan_for_class(&input, &class, &Fallback::default()).unwrap();
        replica_pod(&job, &input, &serve, &plan, &class, (slot, number)).unwrap()
    }

    #[test]
    fn a_replica_pod_is_the_plans_pod_with_a_port_probes_and_its_slot() {
        let serve = ServeSpec {
            port: 8000,
            model_load_timeout_seconds: Some(2400),
            ..ServeSpec::default()
        };
        let pod = build(serve, 2, 7);
        assert_eq!(pod.name_any(), "chat-r2-7");
        let labels = pod.labels();
        assert_eq!(labels["vramfit.io/replica"], "2");
        assert_eq!(labels["vramfit.io/job"], "chat");
        assert_eq!(labels["vramfit.io/job-uid"], fixtures::uid("chat"));
        assert!(
            !labels.contains_key(ATTEMPT_LABEL),
            "replicas have slots, not attempts"
        );
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        let c = &spec.containers[0];
        assert_eq!(c.ports.as_ref().unwrap()[0].container_port, 8000);
        let startup = c.startup_probe.as_ref().unwrap();
        assert_eq!(
            startup.http_get.as_ref().unwrap().path.as_deref(),
            Some("/health")
        );
        assert_eq!(
            startup.period_seconds.unwrap() * startup.failure_threshold.unwrap(),
            2400,
            "the model-load budget"
        );
        let ready = c.readiness_probe.as_ref().unwrap();
        assert_eq!(
            ready.http_get.as_ref().unwrap().port,
            IntOrString::String("http".into())
        );
        assert!(c.liveness_probe.is_some());
        let pre_stop = c.lifecycle.as_ref().unwrap().pre_stop.as_ref().unwrap();
        assert_eq!(
            pre_stop.sleep.as_ref().map(|s| s.seconds),
            Some(DRAIN_SECONDS),
            "a deleted replica keeps serving while its endpoint goes"
        );
        let grace = spec.termination_grace_period_seconds.unwrap_or(30);
        assert!(DRAIN_SECONDS < grace, "the sleep fits the grace period");
        let args = c.args.as_ref().unwrap();
        let at = args.iter().position(|a| a == "--port").unwrap();
        assert_eq!(args[at + 1], "8000");
        assert_eq!(
            recorded_spec_hash(&pod),
            Some(spec_hash(spec).unwrap().as_str())
        );
    }

    #[test]
    fn the_same_plan_is_the_same_spec_on_every_slot_and_a_new_health_path_is_not() {
        let serve = ServeSpec::default();
        let (a, b) = (build(serve.clone(), 0, 1), build(serve.clone(), 3, 9));
        assert_eq!(recorded_spec_hash(&a), recorded_spec_hash(&b));
        let other = build(
            ServeSpec {
                health_path: Some("/v1/models".into()),
                ..serve
            },
            0,
            1,
        );
        assert_ne!(recorded_spec_hash(&a), recorded_spec_hash(&other));
        assert_eq!(startup_failures(1801), 181);
    }
}
