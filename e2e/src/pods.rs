//! The pods the operator creates, and the simulated kubelet that writes their statuses.
use anyhow::{Context as _, Result};
use k8s_openapi::api::core::v1::{ContainerState, Pod};
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use vramfit_api::InferenceJob;

use crate::{Suite, now, started_ago};

/// The workload container of the operator's pods, and the pod labels naming the job and
/// numbering the attempt: the operator's own vocabulary.
pub use vramfit_api::pod_keys::{ATTEMPT_LABEL, CONTAINER_NAME as CONTAINER, JOB_LABEL};

/// A pod status a kubelet would write: the workload container runs.
pub fn pod_running_status(container: &str, image: &str, now: &str) -> Value {
    json!({
        "status": {
            "phase": "Running",
            "startTime": now,
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
            "containerStatuses": [{
                "name": container,
                "image": image,
                "imageID": "",
                "ready": true,
                "started": true,
                "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            }],
        }
    })
}

/// A pod status a kubelet would write for a server: its container runs, the pod has the IP
/// `ip`, and its readiness probe passes (`ready`) or not.
pub fn pod_serving_status(container: &str, image: &str, now: &str, ip: &str, ready: bool) -> Value {
    let word = if ready { "True" } else { "False" };
    json!({
        "status": {
            "phase": "Running",
            "startTime": now,
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                {"type": "ContainersReady", "status": word, "lastTransitionTime": now},
                {"type": "Ready", "status": word, "lastTransitionTime": now},
            ],
            "containerStatuses": [{
                "name": container,
                "image": image,
                "imageID": "",
                "ready": ready,
                "started": true,
                "restartCount": 0,
                "state": {"running": {"startedAt": now}},
            }],
        }
    })
}

/// A pod IP for a simulated pod, stable for its name (10.244.x.y, never .0 or .255).
pub fn pod_ip(name: &str) -> String {
    let hash = vramfit_api::pod_keys::fnv1a64(name.as_bytes());
    let third = (hash >> 8) % 250 + 1;
    let fourth = hash % 250 + 2;
    format!("10.244.{third}.{fourth}")
}

/// How long a simulated workload container ran before it ended (its `startedAt` is this long
/// before its `finishedAt`): long enough for every figure a scenario's workload reports (the
/// operator bounds a report's seconds by the container's run time).
pub const SIMULATED_RUN: std::time::Duration = std::time::Duration::from_secs(3600);

/// A pod status a kubelet would write: the workload container, started at `started`, ended at
/// `now` with `exit_code`.
pub fn pod_terminated_status(
    container: &str,
    image: &str,
    (started, now): (&str, &str),
    exit_code: i32,
    reason: &str,
    message: &str,
) -> Value {
    let phase = if exit_code == 0 {
        "Succeeded"
    } else {
        "Failed"
    };
    json!({
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": now}],
            "containerStatuses": [{
                "name": container,
                "image": image,
                "imageID": "",
                "ready": false,
                "started": false,
                "restartCount": 0,
                "state": {"terminated": {
                    "exitCode": exit_code,
                    "reason": reason,
                    "message": message,
                    "startedAt": started,
                    "finishedAt": now,
                }},
            }],
        }
    })
}

/// The termination message of a simulated CUDA out-of-memory failure.
pub const CUDA_OOM_MESSAGE: &str = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB \
(GPU 0; 15.77 GiB total capacity; 14.90 GiB already allocated)";

/// The name of the pod's workload container (the first container if none is `inference`).
pub fn container_name(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| {
            s.containers
                .iter()
                .find(|c| c.name == CONTAINER)
                .or(s.containers.first())
        })
        .map(|c| c.name.clone())
        .unwrap_or_else(|| CONTAINER.into())
}

/// The args of the pod's first container.
pub fn args_of(pod: &Pod) -> Vec<String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.args.clone())
        .unwrap_or_default()
}

/// The image of the pod's first container.
pub fn image_of(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

/// The node a scheduler bound the pod to.
pub fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

/// The state of the pod's first container, as its kubelet reported it.
pub fn container_state(pod: &Pod) -> Option<ContainerState> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .clone()
}

/// Neither being deleted nor ended.
pub fn is_live(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    pod.metadata.deletion_timestamp.is_none()
        && !matches!(phase, Some("Succeeded") | Some("Failed"))
}

impl Suite {
    /// Pods in the test namespace.
    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Pods whose controller owner is the job (in the job's namespace).
    pub async fn pods_of(&self, job: &InferenceJob) -> Result<Vec<Pod>> {
        let uid = job.uid().unwrap_or_default();
        let namespace = job.namespace().unwrap_or_else(|| self.ns.clone());
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        Ok(pods
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|p| p.owner_references().iter().any(|o| o.uid == uid))
            .collect())
    }

    /// Writes a pod status as a kubelet would.
    pub async fn set_pod_status(&self, pod: &Pod, status: Value) -> Result<()> {
        self.pods()
            .patch_status(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Merge(status),
            )
            .await
            .with_context(|| format!("patching status of pod {}", pod.name_any()))?;
        Ok(())
    }

    /// Writes the status of a running pod.
    pub async fn set_pod_running(&self, pod: &Pod) -> Result<()> {
        self.set_pod_status(
            pod,
            pod_running_status(&container_name(pod), &image_of(pod), &now()),
        )
        .await
    }

    /// Writes the status of a served pod: running at its IP ([`pod_ip`]), Ready or not.
    pub async fn set_pod_serving(&self, pod: &Pod, ready: bool) -> Result<()> {
        self.set_pod_serving_at(pod, ready, &pod_ip(&pod.name_any()))
            .await
    }

    /// [`Self::set_pod_serving`] with the pod's IP `ip` (a loopback address where the suite
    /// serves the replica's metrics).
    pub async fn set_pod_serving_at(&self, pod: &Pod, ready: bool, ip: &str) -> Result<()> {
        self.set_pod_status(
            pod,
            pod_serving_status(&container_name(pod), &image_of(pod), &now(), ip, ready),
        )
        .await
    }

    /// What `kubectl drain` asks for each pod of the node: a policy/v1 Eviction of pod `name`
    /// in `namespace` (`pods/eviction`). Returns the HTTP status (201: evicted; 429: refused by
    /// a PodDisruptionBudget) and the answer's message.
    pub async fn evict(&self, namespace: &str, name: &str) -> Result<(u16, String)> {
        let body = json!({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        });
        let request = http::Request::post(format!(
            "/api/v1/namespaces/{namespace}/pods/{name}/eviction"
        ))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(serde_json::to_vec(&body)?.into())
        .context("building the Eviction request")?;
        // A client that does not retry: kube's default one retries a 429 (up to 15 times,
        // minutes apart), and a refused eviction answers 429.
        let mut config = kube::Config::infer()
            .await
            .context("reading the kubeconfig")?;
        config.default_retry = false;
        let client = kube::Client::try_from(config).context("a client for the eviction")?;
        let response = client
            .send(request)
            .await
            .with_context(|| format!("evicting pod {namespace}/{name}"))?;
        let code = response.status().as_u16();
        let bytes = response
            .into_body()
            .collect_bytes()
            .await
            .with_context(|| format!("reading the answer to the eviction of {name}"))?;
        let answer: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let message = answer["message"].as_str().unwrap_or_default().to_string();
        Ok((code, message))
    }

    /// What a kubelet confirms: pods of `job` being deleted are removed (force-deleted; no
    /// kubelet runs here). Returns their names.
    pub async fn confirm_deletions(&self, job: &InferenceJob) -> Result<Vec<String>> {
        let mut gone = Vec::new();
        for pod in self.pods_of(job).await? {
            if pod.metadata.deletion_timestamp.is_some() {
                let _ = self
                    .pods()
                    .delete(&pod.name_any(), &DeleteParams::default().grace_period(0))
                    .await;
                gone.push(pod.name_any());
            }
        }
        Ok(gone)
    }

    /// Writes the status of a pod the kubelet failed itself, before or without its workload
    /// ending: `reason` `UnexpectedAdmissionError` or `OutOfnvidia.com/gpu` (refused at
    /// admission), `Evicted` (node pressure), with the kubelet's `message`.
    pub async fn set_pod_failed_by_kubelet(
        &self,
        pod: &Pod,
        reason: &str,
        message: &str,
    ) -> Result<()> {
        self.set_pod_status(
            pod,
            serde_json::json!({"status": {"phase": "Failed", "reason": reason, "message": message}}),
        )
        .await
    }

    /// Writes the status of a pod whose workload ended with `exit_code`, `reason` and the
    /// termination message `message`.
    pub async fn set_pod_ended(
        &self,
        pod: &Pod,
        exit_code: i32,
        reason: &str,
        message: &str,
    ) -> Result<()> {
        self.set_pod_status(
            pod,
            pod_terminated_status(
                &container_name(pod),
                &image_of(pod),
                (&started_ago(SIMULATED_RUN), &now()),
                exit_code,
                reason,
                message,
            ),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodes::{SIM_NODES, node_manifest, node_status_patch};

    #[test]
    fn simulated_statuses_carry_what_the_operator_reads() {
        let oom = pod_terminated_status(
            CONTAINER,
            "img",
            ("2026-01-01T00:00:00Z", "2026-01-01T01:00:00Z"),
            1,
            "Error",
            CUDA_OOM_MESSAGE,
        );
        assert_eq!(oom["status"]["phase"], "Failed");
        let msg = oom["status"]["containerStatuses"][0]["state"]["terminated"]["message"]
            .as_str()
            .unwrap();
        assert!(msg.contains("CUDA out of memory"));
        let ok = pod_terminated_status(CONTAINER, "img", ("t0", "t1"), 0, "Completed", "");
        assert_eq!(ok["status"]["phase"], "Succeeded");
        assert_eq!(
            pod_running_status(CONTAINER, "img", "t")["status"]["phase"],
            "Running"
        );
        let status = node_status_patch(&SIM_NODES[3], "t");
        assert_eq!(status["status"]["allocatable"]["nvidia.com/gpu"], "8");
        let manifest = node_manifest(&SIM_NODES[4], "r");
        assert_eq!(manifest["spec"]["taints"].as_array().unwrap().len(), 0);
        assert_eq!(
            node_manifest(&SIM_NODES[0], "r")["spec"]["taints"][0]["key"],
            "nvidia.com/gpu"
        );
    }
}
