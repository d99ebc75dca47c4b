//! Served jobs: the `serve` section of an InferenceJob (a model server behind one Service,
//! each replica planned for the class it lands on) and the per-replica lines of its status
//! (docs/serving.md).
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::job::{Fallback, Runtime};

/// Port a served job listens on when it names none (vLLM's own default).
pub const DEFAULT_PORT: u16 = 8000;
/// Seconds a replica may take to load its model when the job does not say (a 70B model
/// from a network volume takes tens of minutes).
pub const DEFAULT_MODEL_LOAD_TIMEOUT_SECONDS: u32 = 1800;
/// The most replicas a served job may ask for.
pub const MAX_REPLICAS: u32 = 100;
/// Replica restarts kept in `status.recentRestarts` (older ones are counted, not kept).
pub const RECENT_RESTARTS_KEPT: usize = 10;

/// How a job is served: the port, the replicas, the health route and the Service.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ServeSpec {
    /// Port the server listens on (container port, Service port and target). vramfit passes
    /// it to vLLM and llama.cpp as `--port` (with `--host 0.0.0.0`) and to every runtime as
    /// `VRAMFIT_PORT`. Default 8000.
    #[serde(default = "default_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: u16,
    /// Replicas (default 1), each a pod planned for the class it lands on. `kubectl scale`,
    /// an HPA or a KEDA ScaledObject set it through the scale subresource.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 0, max = 100))]
    pub replicas: u32,
    /// HTTP path that answers 200 once the model is loaded and the server answers: the
    /// startup, readiness and liveness probes' route. Default `/health` for vLLM and
    /// llama.cpp; required for transformers and custom.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256), regex(pattern = r"^/[^\s]*$"))]
    pub health_path: Option<String>,
    /// Type of the Service named after the job: `ClusterIP` (default), `NodePort` or
    /// `LoadBalancer`.
    #[serde(default)]
    pub service_type: ServiceType,
    /// Seconds a replica may take to load its model and answer its health route before it
    /// counts as failed (the startup probe's budget; the readiness and liveness probes start
    /// after it). Default 1800.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 30, max = 86400))]
    pub model_load_timeout_seconds: Option<u32>,
    /// `Mixed` (default): each replica goes where the planner would place it, possibly on
    /// different classes with different plans (status says which). `Single`: every replica on
    /// one class, for identical latency and outputs (replicas wait for room on that class).
    #[serde(default)]
    pub replica_classes: ReplicaClasses,
    /// Replicas that follow the load: read from each replica's own metrics against the
    /// concurrency planned for its class, written to `replicas` as `kubectl scale` does
    /// (docs/autoscaling.md). Unset: `replicas` is what a person (or an HPA) writes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscaling: Option<crate::autoscaling::AutoscalingSpec>,
    /// Keep an `InferencePool` (Gateway API Inference Extension, `inference.networking.k8s.io/v1`)
    /// named after the job that selects exactly its serving pods, for a gateway's endpoint
    /// picker (docs/serving.md). Needs that CRD in the cluster; vramfit builds no gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inference_pool: Option<InferencePoolRequest>,
    /// LoRA adapters served on the job's model, each planned into every replica's memory on
    /// its class and loaded at start (docs/serving.md). Adding or removing one rolls the
    /// replicas onto the new list.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub adapters: Vec<crate::adapters::AdapterSpec>,
    /// vLLM: the most adapters one batch runs at once (`--max-loras`, 1 to 16; default: as
    /// many as the job serves, up to 4; never more than it serves). Each one reserves LoRA
    /// buffers on every GPU at the largest rank served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 16))]
    pub max_adapters_per_batch: Option<u32>,
}

/// `serve.inferencePool`: the endpoint picker a gateway asks which replica to send a request.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct InferencePoolRequest {
    /// The picker's Service, in the job's namespace (the llm-d endpoint picker, say).
    pub endpoint_picker: EndpointPicker,
}

/// The endpoint picker's Service.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct EndpointPicker {
    /// The Service's name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Its port (the picker's gRPC ext-proc port; 9002 for the llm-d picker).
    #[schemars(range(min = 1, max = 65535))]
    pub port: u16,
    /// `FailClose` (default): requests fail while the picker does not answer; `FailOpen`: the
    /// gateway routes them to any serving pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_mode: Option<crate::inference_pool::FailureMode>,
}

fn default_port() -> u16 {
    DEFAULT_PORT
}

fn default_replicas() -> u32 {
    1
}

impl Default for ServeSpec {
    fn default() -> Self {
        Self {
            port: DEFAULT_PORT,
            replicas: default_replicas(),
            health_path: None,
            service_type: ServiceType::default(),
            model_load_timeout_seconds: None,
            replica_classes: ReplicaClasses::default(),
            autoscaling: None,
            inference_pool: None,
            adapters: Vec::new(),
            max_adapters_per_batch: None,
        }
    }
}

impl ServeSpec {
    /// The health route: the job's, else the runtime's own (`GET /health` of vLLM's
    /// OpenAI server and of `llama-server`); `None` for transformers and custom without one.
    pub fn health_path_for(&self, runtime: Runtime) -> Option<&str> {
        self.health_path.as_deref().or(match runtime {
            Runtime::Vllm | Runtime::Llamacpp => Some("/health"),
            Runtime::Transformers | Runtime::Custom => None,
        })
    }

    /// The model-load budget in seconds.
    pub fn model_load_timeout(&self) -> u32 {
        self.model_load_timeout_seconds
            .unwrap_or(DEFAULT_MODEL_LOAD_TIMEOUT_SECONDS)
    }
}

/// The Service type of a served job.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ServiceType {
    /// Reachable inside the cluster (default).
    #[default]
    ClusterIP,
    /// Also on a port of every node.
    NodePort,
    /// Also through the cloud's load balancer.
    LoadBalancer,
}

impl ServiceType {
    /// The name the Service API takes.
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceType::ClusterIP => "ClusterIP",
            ServiceType::NodePort => "NodePort",
            ServiceType::LoadBalancer => "LoadBalancer",
        }
    }
}

/// Whether the replicas of a served job may use different classes.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReplicaClasses {
    /// Each replica where the planner would place it, each with its class's plan.
    #[default]
    Mixed,
    /// Every replica on one class.
    Single,
}

/// One replica of a served job, as `status.replicaStatuses` lists it.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaStatus {
    /// The replica's slot (its identity: pods of slot 1 are `<job>-r1-<n>`).
    pub slot: u32,
    /// The pod that serves for this slot (or did, until it failed).
    pub pod_name: String,
    /// The pod's number within the slot (the `<n>` of its name).
    pub incarnation: u32,
    /// The class the pod was planned for.
    pub node_class: String,
    /// One-line summary of its plan.
    pub plan_summary: String,
    /// Whether the pod is Ready (its readiness probe passes): it is in the Service's endpoints.
    pub ready: bool,
    /// The node it runs on, once bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Whether the pod runs the current spec (false while a rolling update has not reached it).
    #[serde(default)]
    pub updated: bool,
    /// Steps taken down after this replica ran out of memory (applied on its class).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Fallback>,
    /// Pods this slot has had replaced after a failure.
    #[serde(default)]
    pub restarts: u32,
    /// Failures in a row (reset once the replica has been ready for 10 minutes); the backoff
    /// before the next pod doubles with each.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failures: u32,
    /// The replacement of a failed pod waits until then (exponential backoff).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<Time>,
    /// Why the replica's last pod ended, while it is down or backing off (`OutOfMemory`,
    /// `NoStepLeft`, `HostOutOfMemory`, `Failed`, `StartTimeout`, `Disrupted`,
    /// `AdmissionRefused`, `Deleted`, `NoClassFits`); unset once a pod serves again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What the replica is doing or why it is down, in one line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The pod a rolling update started for this slot: it replaces `podName` once Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub surge: Option<SurgePod>,
    /// A replica that spans nodes (`gpus.maxNodes` above 1): its group's pods, one per node,
    /// rank 0 the leader (`podName` names the group: `<job>-r<slot>-<n>`, its pods
    /// `<job>-r<slot>-<n>-<rank>`). Empty for a replica of one pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<crate::group::GroupMember>,
    /// Where the pod's weights came from (the node's model cache or the pod's own fetch) and
    /// how long the load took; unset for jobs without `model.huggingFace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<crate::model_cache::ReplicaWeights>,
    /// The adapters the replica's pod serves (`serve.adapters` names, in llama.cpp's id order),
    /// read back from the pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adapters: Vec<String>,
}

/// A rolling update's new pod for a slot, until it replaces the old one.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SurgePod {
    /// The pod.
    pub pod_name: String,
    /// Its number within the slot.
    pub incarnation: u32,
    /// The class it was planned for.
    pub node_class: String,
    /// One-line summary of its plan.
    pub plan_summary: String,
}

/// A replica pod that vramfit replaced after it ended, as `status.recentRestarts` keeps it.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaRestart {
    /// When the failure was seen.
    pub time: Time,
    /// The slot.
    pub slot: u32,
    /// The pod that ended.
    pub pod_name: String,
    /// OutOfMemory, HostOutOfMemory, Failed, Disrupted, AdmissionRefused, StartTimeout,
    /// ScheduleTimeout or Deleted.
    pub reason: String,
    /// What it said, trimmed.
    pub message: String,
    /// The step taken down for the next pod, after an out-of-memory failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_serve_section_gets_the_documented_defaults() {
        let serve: ServeSpec = serde_json::from_str("{}").unwrap();
        assert_eq!(serve, ServeSpec::default());
        assert_eq!(serve.port, 8000);
        assert_eq!(serve.replicas, 1);
        assert_eq!(serve.model_load_timeout(), 1800);
        assert_eq!(serve.health_path_for(Runtime::Vllm), Some("/health"));
        assert_eq!(serve.health_path_for(Runtime::Llamacpp), Some("/health"));
        assert_eq!(serve.health_path_for(Runtime::Transformers), None);
        let own = ServeSpec {
            health_path: Some("/ready".into()),
            ..ServeSpec::default()
        };
        assert_eq!(own.health_path_for(Runtime::Custom), Some("/ready"));
        assert_eq!(own.health_path_for(Runtime::Vllm), Some("/ready"));
        assert_eq!(
            serde_json::to_value(ServiceType::LoadBalancer).unwrap(),
            "LoadBalancer"
        );
    }
}
