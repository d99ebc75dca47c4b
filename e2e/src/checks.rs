//! What the scenarios assert about the operator's work: a placed job's status and pod, its
//! node affinity against the nodes' labels, and one live pod per job.
use std::collections::BTreeMap;

use anyhow::{Result, anyhow, bail, ensure};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt as _;
use kube::api::ListParams;
use vramfit_api::{InferenceJob, Phase};

use crate::{ATTEMPT_LABEL, CONTAINER, JOB_LABEL, Suite, is_live};

/// `Ok` when `seen == expected`, otherwise an error naming both.
pub fn expect_eq<T: PartialEq + std::fmt::Debug>(what: &str, seen: T, expected: T) -> Result<()> {
    if seen == expected {
        Ok(())
    } else {
        bail!("expected {what} = {expected:?}, saw {seen:?}")
    }
}

/// One requirement of a pod's required node affinity: `key In [values]` or `key NotIn [values]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    /// The label.
    pub key: String,
    /// `true` for `In`, `false` for `NotIn`.
    pub within: bool,
    /// The values.
    pub values: Vec<String>,
}

/// The `In` and `NotIn` requirements of a pod's required node affinity (first term); any
/// other operator fails the check that uses them, as vramfit writes none.
pub fn affinity_requirements(pod: &Pod) -> Vec<Requirement> {
    pod.spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .and_then(|r| r.node_selector_terms.first())
        .and_then(|t| t.match_expressions.as_ref())
        .map(|exprs| {
            exprs
                .iter()
                .map(|e| Requirement {
                    key: e.key.clone(),
                    within: e.operator == "In",
                    values: e.values.clone().unwrap_or_default(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a node with `labels` satisfies every requirement, as the scheduler reads them
/// (`NotIn` holds for a node without the label).
pub fn satisfies(requirements: &[Requirement], labels: &BTreeMap<String, String>) -> bool {
    requirements.iter().all(|r| {
        let value = labels.get(&r.key);
        if r.within {
            value.is_some_and(|v| r.values.contains(v))
        } else {
            value.is_none_or(|v| !r.values.contains(v))
        }
    })
}

/// Everything the operator wrote for a placed job: status, conditions and its pod.
pub fn check_placed_job(job: &InferenceJob, pod: &Pod, nodes: &[Node]) -> Result<()> {
    let name = job.name_any();
    let status = job
        .status
        .as_ref()
        .ok_or_else(|| anyhow!("job {name} has no status"))?;
    let class = status
        .node_class
        .clone()
        .ok_or_else(|| anyhow!("job {name}: status.nodeClass is unset"))?;
    let plan = status
        .plan
        .as_ref()
        .ok_or_else(|| anyhow!("job {name}: status.plan is unset"))?;
    expect_eq(
        &format!("job {name} plan.nodeClass"),
        plan.node_class.as_str(),
        class.as_str(),
    )?;
    let bounds = &job.spec.gpus;
    ensure!(
        plan.gpu_count >= bounds.min.max(1) && plan.gpu_count <= bounds.max,
        "job {name}: plan.gpuCount {} outside spec.gpus {}..={}",
        plan.gpu_count,
        bounds.min,
        bounds.max
    );
    ensure!(
        !plan.reasons.is_empty(),
        "job {name}: plan.reasons is empty"
    );
    expect_eq(
        &format!("job {name} status.podName"),
        status.pod_name.clone(),
        Some(pod.name_any()),
    )?;
    ensure!(
        status.attempt_count >= 1,
        "job {name}: attemptCount {}",
        status.attempt_count
    );
    ensure!(
        status
            .attempts
            .last()
            .is_some_and(|a| a.pod_name == pod.name_any()),
        "job {name}: the last of status.attempts should name pod {}, saw {:?}",
        pod.name_any(),
        status.attempts
    );
    ensure!(!status.conditions.is_empty(), "job {name}: no conditions");
    for c in &status.conditions {
        ensure!(
            !c.type_.is_empty()
                && !c.reason.is_empty()
                && ["True", "False", "Unknown"].contains(&c.status.as_str()),
            "job {name}: malformed condition {c:?}"
        );
    }

    let labels = pod.labels();
    expect_eq(
        &format!("pod {} label {ATTEMPT_LABEL}", pod.name_any()),
        labels.get(ATTEMPT_LABEL).cloned(),
        Some(status.attempt_count.to_string()),
    )?;
    check_pod_of_plan(job, pod, plan, &class, nodes)
}

/// What every pod the operator planned carries: the owner reference, the job label, the
/// container with its termination policy, GPU limits and the plan's env contract, the GPU
/// toleration, and a required node affinity that matches simulated nodes with enough GPUs,
/// one of which the scheduler bound it to.
pub fn check_pod_of_plan(
    job: &InferenceJob,
    pod: &Pod,
    plan: &vramfit_api::Plan,
    class: &str,
    nodes: &[Node],
) -> Result<()> {
    let name = job.name_any();
    let class = class.to_string();
    // Owner reference: what lets the garbage collector remove the pod with the job.
    let owner = pod
        .owner_references()
        .iter()
        .find(|o| o.uid == job.uid().unwrap_or_default())
        .ok_or_else(|| {
            anyhow!(
                "pod {} has no owner reference to job {name}",
                pod.name_any()
            )
        })?;
    expect_eq(
        "ownerReference.apiVersion",
        owner.api_version.as_str(),
        "vramfit.io/v1alpha1",
    )?;
    expect_eq("ownerReference.kind", owner.kind.as_str(), "InferenceJob")?;
    expect_eq("ownerReference.name", owner.name.as_str(), name.as_str())?;
    expect_eq("ownerReference.controller", owner.controller, Some(true))?;
    expect_eq(
        "ownerReference.blockOwnerDeletion",
        owner.block_owner_deletion,
        Some(true),
    )?;

    let labels = pod.labels();
    ensure!(
        labels.contains_key(JOB_LABEL),
        "pod {} has no {JOB_LABEL} label: {labels:?}",
        pod.name_any()
    );

    let spec = pod
        .spec
        .as_ref()
        .ok_or_else(|| anyhow!("pod has no spec"))?;
    let container = spec
        .containers
        .iter()
        .find(|c| c.name == CONTAINER)
        .ok_or_else(|| anyhow!("pod {} has no container {CONTAINER}", pod.name_any()))?;
    // Log lines reach status only where the job asked for them.
    let from_logs = job
        .spec
        .pod
        .as_ref()
        .is_some_and(|p| p.termination_message_from_logs);
    expect_eq(
        "terminationMessagePolicy",
        container.termination_message_policy.as_deref(),
        Some(if from_logs {
            "FallbackToLogsOnError"
        } else {
            "File"
        }),
    )?;
    let limit = container
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get("nvidia.com/gpu"))
        .map(|q| q.0.clone());
    expect_eq(
        "container limits nvidia.com/gpu",
        limit,
        Some(plan.gpu_count.to_string()),
    )?;

    let env: BTreeMap<String, String> = container
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect();
    // Every variable the planner's contract gives this plan reaches the pod as planned (the
    // contract itself is unit-tested in the planner).
    let input = vramfit_planner::resolve_job(&job.spec).map_err(|e| anyhow!("job {name}: {e}"))?;
    for (key, value) in vramfit_planner::workload::plan_env(&input, plan) {
        expect_eq(
            &format!("pod {} env {key}", pod.name_any()),
            env.get(&key).cloned(),
            Some(value),
        )?;
    }
    expect_eq(
        &format!("pod {} env VRAMFIT_NODE_CLASS", pod.name_any()),
        env.get("VRAMFIT_NODE_CLASS").cloned(),
        Some(class.clone()),
    )?;
    // PyTorch's settings go to PyTorch workloads only, never to a llama.cpp server.
    let torch_dtype = (job.spec.runtime != vramfit_api::Runtime::Llamacpp)
        .then(|| plan.dtype.as_str().to_string());
    expect_eq(
        &format!("pod {} env TORCH_DTYPE", pod.name_any()),
        env.get("TORCH_DTYPE").cloned(),
        torch_dtype,
    )?;

    ensure!(
        spec.tolerations
            .iter()
            .flatten()
            .any(|t| t.key.as_deref() == Some("nvidia.com/gpu")
                && t.operator.as_deref() == Some("Exists")
                && t.effect.as_deref().is_none_or(|e| e == "NoSchedule")),
        "pod {} does not tolerate the nvidia.com/gpu taint: {:?}",
        pod.name_any(),
        spec.tolerations
    );

    // Required node affinity: it selects simulated GPU nodes with enough GPUs, and never the
    // node without GPUs.
    let requirements = affinity_requirements(pod);
    ensure!(
        !requirements.is_empty(),
        "pod {} has no required node affinity",
        pod.name_any()
    );
    let matching: Vec<&Node> = nodes
        .iter()
        .filter(|n| satisfies(&requirements, n.labels()))
        .collect();
    ensure!(
        !matching.is_empty(),
        "pod {} affinity {requirements:?} matches none of the simulated nodes",
        pod.name_any()
    );
    for node in &matching {
        let gpus: u32 = node
            .labels()
            .get(vramfit_api::labels::GPU_COUNT)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        ensure!(
            gpus >= plan.gpu_count,
            "pod {} affinity matches node {} with {gpus} GPUs, the plan needs {}",
            pod.name_any(),
            node.name_any(),
            plan.gpu_count
        );
    }
    // The scheduler bound the pod to a node of the chosen class.
    let bound = spec
        .node_name
        .as_deref()
        .ok_or_else(|| anyhow!("pod {} is not bound to a node", pod.name_any()))?;
    {
        ensure!(
            matching.iter().any(|n| n.name_any() == bound),
            "pod {} was bound to {bound}, not a node matching its class {class}",
            pod.name_any()
        );
        println!(
            "     pod {} bound by a scheduler to {bound} (class {class})",
            pod.name_any()
        );
    }
    Ok(())
}

/// Everything the operator wrote for a served job whose replicas all have a pod: the status
/// (`replicas`, `ready`, the endpoint, the selector, one line per replica) and each replica's
/// pod — the pod of its line's plan ([`check_pod_of_plan`]), with its slot and the job's uid
/// as labels, the job's port and probes on its health route.
pub fn check_served_job(job: &InferenceJob, pods: &[Pod], nodes: &[Node]) -> Result<()> {
    let name = job.name_any();
    let serve = job
        .spec
        .serve
        .as_ref()
        .ok_or_else(|| anyhow!("job {name} is not served"))?;
    let status = job
        .status
        .as_ref()
        .ok_or_else(|| anyhow!("job {name} has no status"))?;
    let lines = &status.replica_statuses;
    expect_eq(
        &format!("job {name} replicas with a pod"),
        lines.len(),
        serve.replicas as usize,
    )?;
    expect_eq(
        &format!("job {name} status.replicas"),
        status.replicas,
        Some(serve.replicas),
    )?;
    let ready = lines.iter().filter(|l| l.ready).count();
    expect_eq(
        &format!("job {name} status.ready"),
        status.ready.clone(),
        Some(format!("{ready}/{}", serve.replicas)),
    )?;
    let namespace = job.namespace().unwrap_or_default();
    expect_eq(
        &format!("job {name} status.endpoint"),
        status.endpoint.clone(),
        Some(format!("http://{name}.{namespace}.svc:{}", serve.port)),
    )?;
    let uid = job.uid().unwrap_or_default();
    ensure!(
        status
            .selector
            .as_deref()
            .is_some_and(|s| s.contains(&format!("vramfit.io/job-uid={uid}"))),
        "job {name}: status.selector {:?} does not select by the job's uid",
        status.selector
    );
    let health = serve
        .health_path_for(job.spec.runtime)
        .unwrap_or("/health")
        .to_string();
    for line in lines {
        let pod = pods
            .iter()
            .find(|p| p.name_any() == line.pod_name)
            .ok_or_else(|| {
                anyhow!(
                    "job {name}: replica {} names pod {}, which does not exist",
                    line.slot,
                    line.pod_name
                )
            })?;
        let plan: vramfit_api::Plan = pod
            .annotations()
            .get(vramfit_api::pod_keys::PLAN_ANNOTATION)
            .and_then(|json| serde_json::from_str(json).ok())
            .ok_or_else(|| anyhow!("pod {} carries no plan", line.pod_name))?;
        expect_eq(
            &format!("pod {} plan's class", line.pod_name),
            plan.node_class.as_str(),
            line.node_class.as_str(),
        )?;
        check_pod_of_plan(job, pod, &plan, &line.node_class, nodes)?;
        let labels = pod.labels();
        expect_eq(
            &format!(
                "pod {} label {}",
                line.pod_name,
                vramfit_api::pod_keys::REPLICA_LABEL
            ),
            labels.get(vramfit_api::pod_keys::REPLICA_LABEL).cloned(),
            Some(line.slot.to_string()),
        )?;
        expect_eq(
            &format!(
                "pod {} label {}",
                line.pod_name,
                vramfit_api::pod_keys::JOB_UID_LABEL
            ),
            labels.get(vramfit_api::pod_keys::JOB_UID_LABEL).cloned(),
            Some(uid.clone()),
        )?;
        let container = pod
            .spec
            .as_ref()
            .and_then(|s| s.containers.iter().find(|c| c.name == CONTAINER))
            .ok_or_else(|| anyhow!("pod {} has no container {CONTAINER}", line.pod_name))?;
        expect_eq(
            &format!("pod {} container port", line.pod_name),
            container
                .ports
                .iter()
                .flatten()
                .map(|p| p.container_port)
                .collect::<Vec<_>>(),
            vec![i32::from(serve.port)],
        )?;
        for (which, probe) in [
            ("startup", &container.startup_probe),
            ("readiness", &container.readiness_probe),
            ("liveness", &container.liveness_probe),
        ] {
            expect_eq(
                &format!("pod {} {which} probe path", line.pod_name),
                probe
                    .as_ref()
                    .and_then(|p| p.http_get.as_ref())
                    .and_then(|h| h.path.clone()),
                Some(health.clone()),
            )?;
        }
        expect_eq(
            &format!("pod {} restartPolicy", line.pod_name),
            pod.spec.as_ref().and_then(|s| s.restart_policy.clone()),
            Some("Never".to_string()),
        )?;
    }
    Ok(())
}

/// A job's pods are exactly one.
pub fn exactly_one_pod(pods: &[Pod]) -> Result<()> {
    ensure!(
        pods.len() == 1,
        "pods {:?}",
        pods.iter().map(|p| p.name_any()).collect::<Vec<_>>()
    );
    Ok(())
}

/// Exactly one live pod per non-terminal job that has one, and it is the one in status; for a
/// served job, one per replica (and its rolling update's surge pod), each named in status.
pub async fn one_live_pod_per_job(s: &Suite) -> Result<()> {
    let jobs = s.jobs().list(&ListParams::default()).await?.items;
    for job in jobs {
        let status = job.status.clone().unwrap_or_default();
        let live: Vec<String> = s
            .pods_of(&job)
            .await?
            .iter()
            .filter(|p| is_live(p))
            .map(|p| p.name_any())
            .collect();
        if job.spec.serve.is_some() {
            let named: Vec<&str> = status
                .replica_statuses
                .iter()
                .flat_map(|l| {
                    std::iter::once(l.pod_name.as_str())
                        .chain(l.surge.as_ref().map(|s| s.pod_name.as_str()))
                })
                .collect();
            ensure!(
                live.iter().all(|p| named.contains(&p.as_str())),
                "served job {} has live pods {live:?} its replicas {named:?} do not name",
                job.name_any()
            );
            continue;
        }
        ensure!(
            live.len() <= 1,
            "job {} has {} live pods: {live:?}",
            job.name_any(),
            live.len()
        );
        if matches!(status.phase, Some(Phase::Scheduled) | Some(Phase::Running)) {
            ensure!(
                live.len() == 1 && status.pod_name.as_ref() == live.first(),
                "job {} ({:?}) status.podName {:?}, live pods {live:?}",
                job.name_any(),
                status.phase,
                status.pod_name
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PodSpec,
    };

    #[test]
    fn affinity_is_matched_against_node_labels() {
        let pod = Pod {
            spec: Some(PodSpec {
                affinity: Some(Affinity {
                    node_affinity: Some(NodeAffinity {
                        required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                            node_selector_terms: vec![NodeSelectorTerm {
                                match_expressions: Some(vec![
                                    NodeSelectorRequirement {
                                        key: "vramfit.io/gpu.product".into(),
                                        operator: "In".into(),
                                        values: Some(vec!["NVIDIA-A10G".into()]),
                                    },
                                    NodeSelectorRequirement {
                                        key: "vramfit.io/gpu.mixed".into(),
                                        operator: "NotIn".into(),
                                        values: Some(vec!["true".into()]),
                                    },
                                ]),
                                match_fields: None,
                            }],
                        }),
                        preferred_during_scheduling_ignored_during_execution: None,
                    }),
                    ..Affinity::default()
                }),
                ..PodSpec::default()
            }),
            ..Pod::default()
        };
        let reqs = affinity_requirements(&pod);
        assert_eq!(reqs.len(), 2);
        let a10g = BTreeMap::from([(
            "vramfit.io/gpu.product".to_string(),
            "NVIDIA-A10G".to_string(),
        )]);
        let h100 = BTreeMap::from([(
            "vramfit.io/gpu.product".to_string(),
            "NVIDIA-H100".to_string(),
        )]);
        assert!(satisfies(&reqs, &a10g), "NotIn holds without the label");
        assert!(!satisfies(&reqs, &h100));
        let mut mixed = a10g.clone();
        mixed.insert("vramfit.io/gpu.mixed".into(), "true".into());
        assert!(!satisfies(&reqs, &mixed));
        assert!(affinity_requirements(&Pod::default()).is_empty());
    }
}
