//! InferenceJobs: creating them, reading their status and events, waiting for them, and
//! deleting them.
use std::time::Duration;
use vramfit_api::event_reasons::EventReason;

use anyhow::{Context as _, Result, anyhow, bail, ensure};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use vramfit_api::{InferenceJob, Phase};

use crate::{ATTEMPT_LABEL, MANAGER, Suite, eventually, node_of, with_namespace};

/// How long a job has to settle (get its pod, reach a phase).
pub const SETTLE: Duration = Duration::from_secs(90);

/// A job's conditions, one line each, for messages.
pub fn conditions_of(job: &InferenceJob) -> Vec<String> {
    job.status
        .as_ref()
        .map(|s| {
            s.conditions
                .iter()
                .map(|c| format!("{}={} ({}: {})", c.type_, c.status, c.reason, c.message))
                .collect()
        })
        .unwrap_or_default()
}

/// A job limited to `classes`, one GPU, with the given preference.
pub fn pinned_job(s: &Suite, name: &str, classes: &[&str], preference: &str) -> Value {
    let mut job = s.own_job(name, 3);
    job["spec"]["gpus"] = json!({"min": 1, "max": 1});
    job["spec"]["nodeClasses"] = json!({ "allowed": classes });
    job["spec"]["preference"] = json!(preference);
    job
}

/// An InferenceJob named `name` in the test namespace with `spec`.
pub fn job_manifest(s: &Suite, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "vramfit.io/v1alpha1",
        "kind": "InferenceJob",
        "metadata": {"name": name, "namespace": s.ns},
        "spec": spec,
    })
}

/// Mistral-7B served by vLLM: `replicas` replicas on `classes`, context 8192 × batch 4.
pub fn served_job(s: &Suite, name: &str, replicas: u32, classes: &[&str]) -> Value {
    let spec = json!({
        "model": {"preset": "mistral-7b-instruct-v0.3"},
        "runtime": "vllm",
        "image": "vllm/vllm-openai:v0.10.2",
        "args": ["--model", "mistralai/Mistral-7B-Instruct-v0.3"],
        "contextLength": 8192,
        "batchSize": 4,
        "gpus": {"min": 1, "max": 2},
        "nodeClasses": {"allowed": classes},
        "serve": {"port": 8000, "replicas": replicas},
    });
    job_manifest(s, name, spec)
}

impl Suite {
    /// InferenceJobs in the test namespace.
    pub fn jobs(&self) -> Api<InferenceJob> {
        self.jobs_in(&self.ns)
    }

    /// InferenceJobs in `namespace`.
    pub fn jobs_in(&self, namespace: &str) -> Api<InferenceJob> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// Server-side applies a job manifest into the test namespace.
    pub async fn apply_job(&self, manifest: Value) -> Result<InferenceJob> {
        self.apply_job_in(&self.ns, manifest).await
    }

    /// Server-side applies a job manifest into `namespace`.
    pub async fn apply_job_in(&self, namespace: &str, manifest: Value) -> Result<InferenceJob> {
        let name = manifest["metadata"]["name"]
            .as_str()
            .ok_or_else(|| anyhow!("manifest has no name"))?
            .to_string();
        let manifest = with_namespace(manifest, namespace)?;
        self.jobs_in(namespace)
            .patch(
                &name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&manifest),
            )
            .await
            .with_context(|| format!("applying InferenceJob {namespace}/{name}"))
    }

    /// A small job of the suite's own (Mistral 7B under transformers, 1 to 4 GPUs).
    pub fn own_job(&self, name: &str, max_attempts: u32) -> Value {
        let spec = json!({
            "model": {"preset": "mistral-7b-instruct-v0.3"},
            "runtime": "transformers",
            "image": "ghcr.io/example/vramfit-e2e:1",
            "command": ["python", "serve.py"],
            "contextLength": 4096,
            "allowedQuantizations": ["none", "int8", "nf4"],
            "gpus": {"min": 1, "max": 4},
            "maxAttempts": max_attempts,
        });
        job_manifest(self, name, spec)
    }

    /// Reads job `name`.
    pub async fn job(&self, name: &str) -> Result<InferenceJob> {
        self.jobs()
            .get(name)
            .await
            .with_context(|| format!("reading InferenceJob {name}"))
    }

    /// Waits for the job to have a pod of attempt `attempt` and status pointing at it.
    pub async fn wait_pod(&self, name: &str, attempt: u32) -> Result<(InferenceJob, Pod)> {
        eventually(
            &format!("job {name} to get the pod of attempt {attempt}"),
            SETTLE,
            || async {
                let job = self.job(name).await?;
                let status = job.status.clone().unwrap_or_default();
                let pods = self.pods_of(&job).await?;
                let pod = pods
                    .iter()
                    .find(|p| {
                        p.labels().get(ATTEMPT_LABEL).map(String::as_str)
                            == Some(attempt.to_string().as_str())
                    })
                    .cloned();
                match pod {
                    // Bound too: every cluster runs a scheduler, and where it puts the pod is
                    // part of what is checked.
                    Some(pod)
                        if status.pod_name.as_deref() == Some(pod.name_any().as_str())
                            && node_of(&pod).is_some() =>
                    {
                        Ok((job, pod))
                    }
                    _ => bail!(
                        "phase {:?}, status.podName {:?}, pods (name, attempt, node) {:?}, conditions {:?}",
                        status.phase,
                        status.pod_name,
                        pods.iter()
                            .map(|p| (
                                p.name_any(),
                                p.labels().get(ATTEMPT_LABEL).cloned(),
                                node_of(p).map(str::to_string)
                            ))
                            .collect::<Vec<_>>(),
                        status
                            .conditions
                            .iter()
                            .map(|c| format!(
                                "{}={} {}: {}",
                                c.type_, c.status, c.reason, c.message
                            ))
                            .collect::<Vec<_>>()
                    ),
                }
            },
        )
        .await
    }

    /// Waits until served job `name` has `n` replicas, each with a bound pod its replica line
    /// names; returns the job and those pods.
    pub async fn wait_replicas(&self, name: &str, n: usize) -> Result<(InferenceJob, Vec<Pod>)> {
        eventually(
            &format!("job {name} to have {n} replicas with bound pods"),
            SETTLE,
            || async {
                let job = self.job(name).await?;
                let status = job.status.clone().unwrap_or_default();
                let pods = self.pods_of(&job).await?;
                let bound: Vec<Pod> = status
                    .replica_statuses
                    .iter()
                    .filter_map(|l| pods.iter().find(|p| p.name_any() == l.pod_name))
                    .filter(|p| node_of(p).is_some() && p.metadata.deletion_timestamp.is_none())
                    .cloned()
                    .collect();
                ensure!(
                    bound.len() == n && status.replica_statuses.len() == n,
                    "replicas {:?}, pods {:?}, conditions {:?}",
                    status
                        .replica_statuses
                        .iter()
                        .map(|l| (&l.pod_name, &l.node_class, l.ready))
                        .collect::<Vec<_>>(),
                    pods.iter()
                        .map(|p| (p.name_any(), node_of(p).map(str::to_string)))
                        .collect::<Vec<_>>(),
                    conditions_of(&job)
                );
                Ok((job, bound))
            },
        )
        .await
    }

    /// Waits until job `name` reaches one of `phases`.
    pub async fn wait_phase(&self, name: &str, phases: &[Phase]) -> Result<InferenceJob> {
        eventually(
            &format!("job {name} to reach phase {phases:?}"),
            SETTLE,
            || async {
                let job = self.job(name).await?;
                let phase = job.status.as_ref().and_then(|s| s.phase);
                match phase {
                    Some(p) if phases.contains(&p) => Ok(job),
                    _ => bail!("phase {phase:?}, conditions {:?}", conditions_of(&job)),
                }
            },
        )
        .await
    }

    /// Waits until job `name` has condition `type_` with `status` (`True`, `False`).
    pub async fn wait_condition(
        &self,
        name: &str,
        type_: &str,
        status: &str,
    ) -> Result<InferenceJob> {
        eventually(
            &format!("job {name} to have {type_}={status}"),
            SETTLE,
            || async {
                let job = self.job(name).await?;
                let found = job.status.as_ref().is_some_and(|st| {
                    st.conditions
                        .iter()
                        .any(|c| c.type_ == type_ && c.status == status)
                });
                ensure!(found, "conditions {:?}", conditions_of(&job));
                Ok(job)
            },
        )
        .await
    }

    /// Event reasons recorded on the job (events.k8s.io/v1).
    pub async fn event_reasons(&self, job: &str) -> Result<Vec<String>> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.ns);
        Ok(events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| {
                e.regarding.as_ref().is_some_and(|r| {
                    r.name.as_deref() == Some(job) && r.kind.as_deref() == Some("InferenceJob")
                })
            })
            .filter_map(|e| e.reason)
            .collect())
    }

    /// Waits (30 s) until every event reason in `reasons` is recorded on job `job`.
    pub async fn wait_events(&self, job: &str, reasons: &[EventReason]) -> Result<()> {
        eventually(
            &format!("events {reasons:?} on job {job}"),
            Duration::from_secs(30),
            || async {
                let seen = self.event_reasons(job).await?;
                let missing: Vec<_> = reasons
                    .iter()
                    .filter(|r| !seen.iter().any(|s| s == r.as_str()))
                    .collect();
                ensure!(missing.is_empty(), "missing {missing:?}; seen {seen:?}");
                Ok(())
            },
        )
        .await
    }

    /// Deletes jobs and (forcefully, as no kubelet confirms it) their pods, to free GPUs.
    pub async fn delete_jobs(&self, names: &[String]) -> Result<()> {
        for name in names {
            let Some(job) = self.jobs().get_opt(name).await? else {
                continue;
            };
            let _ = self.jobs().delete(name, &DeleteParams::background()).await;
            // The job first, then its pods: a pod deleted under a live job would be replaced.
            self.wait_job_deleted(name).await?;
            for pod in self.pods_of(&job).await? {
                let _ = self
                    .pods()
                    .delete(&pod.name_any(), &DeleteParams::default().grace_period(0))
                    .await;
            }
        }
        Ok(())
    }

    /// Waits (30 s) until job `name` is gone.
    pub async fn wait_job_deleted(&self, name: &str) -> Result<()> {
        eventually(
            &format!("job {name} to be deleted"),
            Duration::from_secs(30),
            || async {
                match self.jobs().get_opt(name).await? {
                    None => Ok(()),
                    Some(j) => bail!("still there, finalizers {:?}", j.finalizers()),
                }
            },
        )
        .await
    }
}
