//! How a workload pod stands or ended (pure): waiting, running, succeeded (with the
//! workload's figures), garbage output, out of memory, or another failure. Out of memory and
//! garbage output are what vramfit retries one step down (docs/planning.md).
use k8s_openapi::api::core::v1::{ContainerStateTerminated, ContainerStatus, Pod};
use vramfit_api::training_report::{LossCheck, TrainingSummary};
use vramfit_api::workload_report::{self, OutputCheck, WorkSummary, WorkloadReport};

/// Substrings (compared case-insensitively) that mark a GPU or host out-of-memory failure in
/// a container's termination message or reason. The message is what the workload wrote to
/// `/dev/termination-log`, or, for a job with `pod.terminationMessageFromLogs`, its log tail.
pub const OOM_MARKERS: &[&str] = &[
    // PyTorch: "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB".
    "cuda out of memory",
    "outofmemoryerror",
    // CUDA runtime and driver API errors.
    "cudaerrormemoryallocation",
    "cuda_error_out_of_memory",
    "cuda error: out of memory",
    // cuBLAS workspace allocation.
    "cublas_status_alloc_failed",
    // llama.cpp: "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 5120.00 MiB on
    // device 0: cudaMalloc failed: out of memory" and "failed to allocate CUDA0 buffer".
    "ggml_backend_cuda_buffer_type_alloc_buffer",
    "cudamalloc failed: out of memory",
    // llama.cpp (`src/llama-kv-cache.cpp`): `throw std::runtime_error("failed to allocate
    // buffer for kv cache")`, also matched by the rule below.
    "failed to allocate buffer for kv cache",
    // vLLM when the weights leave no room for the KV cache.
    "no available memory for the cache blocks",
    // vLLM V1 when the KV cache left cannot hold one sequence of --max-model-len ("… KV cache
    // is needed, which is larger than the available KV cache memory (… GiB)"). Its out of
    // memory while profiling or warming up says "CUDA out of memory", matched above.
    "larger than the available kv cache memory",
];

/// Longest message kept in status (the termination message can hold 4 KiB of logs).
pub const MAX_MESSAGE: usize = 400;

/// Where a pod stands.
#[derive(Clone, Debug, PartialEq)]
pub enum PodState {
    /// Not running yet: waiting for a node, pulling the image, starting.
    Waiting {
        /// The node it is bound to, once bound.
        node: Option<String>,
        /// Why it waits, when Kubernetes says (e.g. the scheduler's message).
        detail: Option<String>,
    },
    /// Running.
    Running {
        /// The node it runs on.
        node: Option<String>,
    },
    /// Finished successfully.
    Succeeded {
        /// The node it ran on.
        node: Option<String>,
        /// The workload's own figures, when its termination message reports them.
        summary: Option<WorkSummary>,
        /// A fine-tuning workload's figures, when it reports them.
        training: Option<TrainingSummary>,
    },
    /// Ended because the workload's output check found garbage (its termination message says
    /// so, docs/workload-contract.md).
    BadOutput {
        /// The node it ran on.
        node: Option<String>,
        /// The check's numbers.
        check: OutputCheck,
    },
    /// Ended because a fine-tuning workload's loss became NaN or infinite (its termination
    /// message says so): the training counterpart of garbage output.
    LossDiverged {
        /// The node it ran on.
        node: Option<String>,
        /// The check's report.
        check: LossCheck,
    },
    /// Ended out of GPU memory (a CUDA, llama.cpp or vLLM out-of-memory error in its message).
    OutOfMemory {
        /// The node it ran on.
        node: Option<String>,
        /// The failure, trimmed.
        message: String,
    },
    /// Killed at its host memory limit (`OOMKilled`) with no GPU out-of-memory error: a step
    /// down on the GPU does not cure it.
    HostOutOfMemory {
        /// The node it ran on.
        node: Option<String>,
        /// The failure, trimmed.
        message: String,
    },
    /// Ended because Kubernetes took it away, not because the workload failed: evicted,
    /// preempted, drained, deleted, or its node shut down. vramfit runs the same plan again in
    /// a new pod at once.
    Disrupted {
        /// The node it was on.
        node: Option<String>,
        /// What Kubernetes said, trimmed.
        message: String,
    },
    /// Refused by the kubelet at admission, before any container ran: a device plugin's
    /// `Allocate` failed (`UnexpectedAdmissionError`), the node lacked a resource
    /// (`OutOf<resource>`), its affinity, ports, taints or OS no longer matched. Not the
    /// workload's fault either, but a node that refuses once may refuse every pod placed
    /// there: the next pod waits a backoff.
    AdmissionRefused {
        /// The node that refused it.
        node: Option<String>,
        /// The kubelet's reason and message, trimmed.
        message: String,
    },
    /// Ended with another failure.
    Failed {
        /// The node it ran on.
        node: Option<String>,
        /// The failure, trimmed.
        message: String,
    },
}

impl PodState {
    /// The node the pod is bound to.
    pub fn node(&self) -> Option<&str> {
        match self {
            PodState::Waiting { node, .. }
            | PodState::Running { node }
            | PodState::Succeeded { node, .. }
            | PodState::BadOutput { node, .. }
            | PodState::LossDiverged { node, .. }
            | PodState::OutOfMemory { node, .. }
            | PodState::HostOutOfMemory { node, .. }
            | PodState::Disrupted { node, .. }
            | PodState::AdmissionRefused { node, .. }
            | PodState::Failed { node, .. } => node.as_deref(),
        }
    }

    /// Whether the pod has ended.
    pub fn is_finished(&self) -> bool {
        matches!(
            self,
            PodState::Succeeded { .. }
                | PodState::BadOutput { .. }
                | PodState::LossDiverged { .. }
                | PodState::OutOfMemory { .. }
                | PodState::Disrupted { .. }
                | PodState::AdmissionRefused { .. }
                | PodState::Failed { .. }
        )
    }
}

/// Reads a pod's state from its status.
pub fn classify(pod: &Pod) -> PodState {
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty());
    let status = pod.status.clone().unwrap_or_default();
    match status.phase.as_deref() {
        Some("Running") => PodState::Running { node },
        Some("Succeeded") => PodState::Succeeded {
            node,
            summary: reports(&status.container_statuses).find_map(|r| match r {
                WorkloadReport::Result(summary) => Some(summary),
                _ => None,
            }),
            training: reports(&status.container_statuses).find_map(|r| match r {
                WorkloadReport::TrainingResult(summary) => Some(summary),
                _ => None,
            }),
        },
        Some("Failed") if refused_at_admission(pod) => PodState::AdmissionRefused {
            node,
            message: trim_message(&disruption_message(pod)),
        },
        Some("Failed") if !disrupted(pod) => {
            let bad = reports(&status.container_statuses).find_map(|r| match r {
                WorkloadReport::OutputCheckFailed(check) => Some(PodState::BadOutput {
                    node: node.clone(),
                    check,
                }),
                WorkloadReport::LossCheckFailed(check) => Some(PodState::LossDiverged {
                    node: node.clone(),
                    check,
                }),
                _ => None,
            });
            bad.unwrap_or_else(|| failed(node, &status))
        }
        Some("Failed") if disrupted(pod) => PodState::Disrupted {
            node,
            message: trim_message(&disruption_message(pod)),
        },
        _ => {
            let detail = status
                .conditions
                .iter()
                .flatten()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")
                .map(|c| c.message.clone().or(c.reason.clone()).unwrap_or_default())
                .or_else(|| waiting_reason(status.container_statuses.iter().flatten()))
                .filter(|d| !d.is_empty())
                .map(|d| trim_message(&d));
            PodState::Waiting { node, detail }
        }
    }
}

/// The reports in the termination messages of containers that have ended; a result's figures
/// bounded by what the container's own start and finish times allow
/// ([`WorkSummary::bounded`]).
fn reports(statuses: &Option<Vec<ContainerStatus>>) -> impl Iterator<Item = WorkloadReport> + '_ {
    statuses
        .iter()
        .flatten()
        .filter_map(|s| s.state.as_ref()?.terminated.as_ref())
        .filter_map(|ended| {
            let report = workload_report::parse(ended.message.as_deref()?)?;
            Some(match report {
                WorkloadReport::Result(summary) => {
                    WorkloadReport::Result(summary.bounded(run_seconds(ended)))
                }
                WorkloadReport::TrainingResult(summary) => {
                    let work = summary.work().bounded(run_seconds(ended));
                    WorkloadReport::TrainingResult(TrainingSummary {
                        tokens: work.items,
                        seconds: work.seconds,
                        peak_gpu_memory_mib: work.peak_gpu_memory_mib,
                        ..summary
                    })
                }
                other => other,
            })
        })
}

/// How long a container ran, from its start and finish times (unknown without both).
fn run_seconds(ended: &ContainerStateTerminated) -> Option<f64> {
    let (started, finished) = (ended.started_at.as_ref()?, ended.finished_at.as_ref()?);
    let ran = finished.0.duration_since(started.0);
    Some(ran.as_secs_f64().max(0.0))
}

fn failed(node: Option<String>, status: &k8s_openapi::api::core::v1::PodStatus) -> PodState {
    let statuses: Vec<&ContainerStatus> = status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .collect();
    failure(
        node,
        &statuses,
        status.reason.as_deref(),
        status.message.as_deref(),
    )
}

/// Pod `status.reason`s the kubelet sets when it, not the workload, ended a pod that it had
/// admitted: eviction (also under node pressure), preemption, node shutdown.
const DISRUPTION_REASONS: &[&str] = &[
    "Evicted",
    "Preempting",
    "Terminated",
    "Shutdown",
    "NodeShutdown",
    "NodeLost",
    "DeletionByTaintManager",
];

/// Pod `status.reason`s of the kubelet's admission handlers, besides `OutOf<resource>`
/// (`OutOfcpu`, `OutOfnvidia.com/gpu`), as Kubernetes' `pkg/kubelet` (1.32–1.35) names them:
/// `lifecycle/predicate.go` (`UnexpectedAdmissionError` when a device plugin's `Allocate` or
/// another admit step fails, the scheduler's predicates re-run on the node — `NodeAffinity`,
/// `NodeName`, `NodePorts`, `TaintToleration` — and the OS checks), `lifecycle/handlers.go`
/// (`AppArmor`, `PodLevelResourcesNotSupported`), `cm/admission/errors.go`
/// (`EmptyPodSharedPoolError`), `cm/topologymanager` (`TopologyAffinityError`),
/// `cm/cpumanager` (`SMTAlignmentError`), `sysctl/allowlist.go` (`SysctlForbidden`);
/// `NodeSelectorMismatching` is the older kubelets' name for `NodeAffinity`.
const ADMISSION_REASONS: &[&str] = &[
    "UnexpectedAdmissionError",
    "NodeAffinity",
    "NodeSelectorMismatching",
    "NodeName",
    "NodePorts",
    "TaintToleration",
    "PodOSSelectorNodeLabelDoesNotMatch",
    "PodOSNotSupported",
    "InvalidNodeInfo",
    "InitContainerRestartPolicyForbidden",
    "SupplementalGroupsPolicyNotSupported",
    "UnknownReason",
    "UnexpectedPredicateFailureType",
    "TopologyAffinityError",
    "SMTAlignmentError",
    "SysctlForbidden",
    "AppArmor",
    "PodLevelResourcesNotSupported",
    "EmptyPodSharedPoolError",
];

/// Whether a failed pod was refused by its node's kubelet at admission, before any container
/// ran (no admission reason is given to a pod the kubelet admitted).
fn refused_at_admission(pod: &Pod) -> bool {
    let reason = pod.status.as_ref().and_then(|s| s.reason.as_deref());
    reason.is_some_and(|r| ADMISSION_REASONS.contains(&r) || r.starts_with("OutOf"))
}

/// Whether a failed pod was ended by Kubernetes rather than by its workload: it is being
/// deleted, carries the `DisruptionTarget` condition (eviction, preemption, taint manager,
/// drain), or the kubelet gave a disruption reason (eviction, node shutdown).
fn disrupted(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    let disruption_target = status.and_then(|s| s.conditions.as_ref()).is_some_and(|c| {
        c.iter()
            .any(|c| c.type_ == "DisruptionTarget" && c.status == "True")
    });
    let reason = status.and_then(|s| s.reason.as_deref()).unwrap_or_default();
    pod.metadata.deletion_timestamp.is_some()
        || disruption_target
        || DISRUPTION_REASONS.contains(&reason)
}

fn disruption_message(pod: &Pod) -> String {
    let status = pod.status.as_ref();
    let condition = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "DisruptionTarget"))
        .and_then(|c| c.message.clone().or(c.reason.clone()));
    let reason = status.and_then(|s| s.reason.clone());
    let message = status.and_then(|s| s.message.clone());
    match (reason, message.or(condition)) {
        (Some(r), Some(m)) => format!("{r}: {m}"),
        (Some(r), None) => r,
        (None, Some(m)) => m,
        (None, None) => "the pod was deleted".to_string(),
    }
}

fn waiting_reason<'a>(statuses: impl Iterator<Item = &'a ContainerStatus>) -> Option<String> {
    statuses
        .filter_map(|s| s.state.as_ref()?.waiting.as_ref())
        .find_map(|w| match (&w.reason, &w.message) {
            (Some(r), Some(m)) => Some(format!("{r}: {m}")),
            (Some(r), None) => Some(r.clone()),
            (None, m) => m.clone(),
        })
}

fn failure(
    node: Option<String>,
    statuses: &[&ContainerStatus],
    pod_reason: Option<&str>,
    pod_message: Option<&str>,
) -> PodState {
    let terminated: Vec<_> = statuses
        .iter()
        .filter_map(|s| {
            let now = s.state.as_ref().and_then(|state| state.terminated.as_ref());
            now.or_else(|| {
                s.last_state
                    .as_ref()
                    .and_then(|state| state.terminated.as_ref())
            })
        })
        .filter(|t| t.exit_code != 0 || t.reason.as_deref() == Some("OOMKilled"))
        .collect();
    for t in &terminated {
        let reason = t.reason.as_deref().unwrap_or_default();
        let message = t.message.as_deref().unwrap_or_default();
        if reason == "OOMKilled" {
            // The kernel killed it at the container's memory limit; a GPU error logged
            // before that still makes it a GPU failure.
            return match oom_line(message) {
                Some(line) => PodState::OutOfMemory {
                    node,
                    message: line,
                },
                None => PodState::HostOutOfMemory {
                    node,
                    message: format!(
                        "container OOMKilled (exit code {}): host memory limit reached",
                        t.exit_code
                    ),
                },
            };
        }
        if let Some(line) = oom_line(message).or_else(|| oom_line(reason)) {
            return PodState::OutOfMemory {
                node,
                message: line,
            };
        }
    }
    if let Some(line) = pod_message.and_then(oom_line) {
        return PodState::OutOfMemory {
            node,
            message: line,
        };
    }
    let message = match terminated.first() {
        Some(t) => {
            let reason = t.reason.as_deref().unwrap_or("Error");
            let tail = t
                .message
                .as_deref()
                .map(last_line)
                .filter(|l| !l.is_empty());
            match tail {
                Some(line) => format!("{reason} (exit code {}): {line}", t.exit_code),
                None => format!("{reason} (exit code {})", t.exit_code),
            }
        }
        None => match (pod_reason, pod_message) {
            (Some(r), Some(m)) => format!("{r}: {m}"),
            (Some(r), None) => r.to_string(),
            (None, Some(m)) => m.to_string(),
            (None, None) => "pod failed".to_string(),
        },
    };
    PodState::Failed {
        node,
        message: trim_message(&message),
    }
}

/// Whether `text` reports an out-of-memory failure.
pub fn is_oom_text(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    // ggml/llama.cpp name the buffer's backend in between: `failed to allocate CUDA0 buffer of
    // size …` (`ggml-alloc.c`), `unable to allocate CUDA0 buffer` (`src/llama-model.cpp`
    // `load_tensors`).
    OOM_MARKERS.iter().any(|m| lower.contains(m))
        || ((lower.contains("failed to allocate") || lower.contains("unable to allocate"))
            && lower.contains("buffer"))
}

/// The line of `text` that reports out of memory, trimmed, if any. Source lines quoted in a
/// Python traceback (the line after `File "…", line N`) are code, not a report: an
/// `except torch.OutOfMemoryError:` there says nothing about how the process ended.
fn oom_line(text: &str) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let quoted_source = |i: usize| i > 0 && lines[i - 1].trim_start().starts_with("File \"");
    (0..lines.len())
        .rev()
        .find(|&i| !quoted_source(i) && is_oom_text(lines[i]))
        .map(|i| lines[i])
        .or_else(|| (lines.len() <= 1 && is_oom_text(text)).then_some(text))
        .map(|line| trim_message(line.trim()))
}

fn last_line(text: &str) -> &str {
    text.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or_default()
}

/// Trims a message to [`MAX_MESSAGE`] characters on a character boundary.
pub fn trim_message(text: &str) -> String {
    let text = text.trim();
    if text.chars().count() <= MAX_MESSAGE {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(MAX_MESSAGE - 1).collect();
    cut.push('…');
    cut
}

pub mod schedule_deadline;
pub mod start_deadline;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    #[test]
    fn phases_map_to_states() {
        let pod = fixtures::pending_pod("chat-1", None);
        assert_eq!(
            classify(&pod),
            PodState::Waiting {
                node: None,
                detail: None
            }
        );
        let pod = fixtures::running_pod("chat-1", "gpu-a");
        assert_eq!(
            classify(&pod),
            PodState::Running {
                node: Some("gpu-a".into())
            }
        );
        let pod = fixtures::succeeded_pod("chat-1", "gpu-a");
        assert!(matches!(classify(&pod), PodState::Succeeded { .. }));
    }

    #[test]
    fn oom_killed_is_host_out_of_memory_unless_the_gpu_ran_out_first() {
        let pod = fixtures::failed_pod("chat-1", "gpu-a", "OOMKilled", 137, "");
        let PodState::HostOutOfMemory { message, .. } = classify(&pod) else {
            panic!("{:?}", classify(&pod))
        };
        assert!(message.contains("OOMKilled"), "{message}");
        let gpu = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB";
        let pod = fixtures::failed_pod("chat-1", "gpu-a", "OOMKilled", 137, gpu);
        assert!(matches!(classify(&pod), PodState::OutOfMemory { .. }));
    }

    #[test]
    fn cuda_messages_are_out_of_memory() {
        for text in [
            "Traceback...\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
            "RuntimeError: CUDA error: out of memory",
            "cudaErrorMemoryAllocation",
            "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
            "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 5120.00 MiB on device 0: cudaMalloc failed: out of memory",
            "llama_model_load: error loading model: failed to allocate CUDA0 buffer of size 4404019200",
            // src/llama-model.cpp load_tensors: format("unable to allocate %s buffer", …).
            "llama_model_load: error loading model: unable to allocate CUDA0 buffer",
            // src/llama-kv-cache.cpp: "failed to allocate buffer for kv cache".
            "llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache",
            // ggml/src/ggml-alloc.c: "%s: failed to allocate %s buffer of size %zu".
            "alloc_tensor_range: failed to allocate CUDA0 buffer of size 1632174080",
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`",
            "(EngineCore_0 pid=81) ValueError: To serve at least one request with the models's max seq len (32768), (4.00 GiB KV cache is needed, which is larger than the available KV cache memory (2.11 GiB).\nRuntimeError: Engine core initialization failed. See root cause above.",
            "RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.",
        ] {
            let pod = fixtures::failed_pod("chat-1", "gpu-a", "Error", 1, text);
            let state = classify(&pod);
            let PodState::OutOfMemory { message, node } = state else {
                panic!("{text}: {state:?}")
            };
            assert_eq!(node.as_deref(), Some("gpu-a"));
            assert!(
                !message.contains("Traceback"),
                "the OOM line is kept: {message}"
            );
        }
    }

    #[test]
    fn a_llama_server_log_tail_whose_kv_cache_did_not_fit_is_out_of_memory() {
        // llama-server b11312 (CPU build), verbatim, its KV cache (2 GiB) refused by an
        // address-space limit: the log tail a job with `pod.terminationMessageFromLogs` gets.
        let tail = "\
0.00.022.165 I srv    load_model: loading model '/models/tiny-llama.gguf'
0.00.103.139 W llama_context: n_ctx_seq (1048576) > n_ctx_train (4096) -- possible training context overflow
0.00.146.039 E ggml_aligned_malloc: insufficient memory (attempted to allocate 2048.00 MB)
0.00.146.086 E ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 2147483648
0.00.146.098 E alloc_tensor_range: failed to allocate CPU buffer of size 2147483648
0.00.149.142 E llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache
0.00.149.179 E cmn  common_init_: failed to create context with model '/models/tiny-llama.gguf'
0.00.149.207 E srv    load_model: failed to create_context with model '/models/tiny-llama.gguf'
0.00.149.222 I srv    operator(): operator(): cleaning up before exit...
0.00.149.560 E srv  llama_server: exiting due to model loading error
";
        let pod = fixtures::failed_pod("chat-1", "node-a", "Error", 1, tail);
        let PodState::OutOfMemory { message, .. } = classify(&pod) else {
            panic!("{:?}", classify(&pod))
        };
        assert_eq!(
            message,
            "0.00.149.142 E llama_init_from_model: failed to initialize the context: \
             failed to allocate buffer for kv cache"
        );
    }

    #[test]
    fn other_failures_keep_their_message() {
        let pod = fixtures::failed_pod(
            "chat-1",
            "gpu-a",
            "Error",
            2,
            "loading...\nFileNotFoundError: /models/x.gguf",
        );
        assert_eq!(
            classify(&pod),
            PodState::Failed {
                node: Some("gpu-a".into()),
                message: "Error (exit code 2): FileNotFoundError: /models/x.gguf".into()
            }
        );
        let long = "x".repeat(2000);
        let pod = fixtures::failed_pod("chat-1", "gpu-a", "Error", 1, &long);
        let PodState::Failed { message, .. } = classify(&pod) else {
            panic!()
        };
        assert_eq!(message.chars().count(), MAX_MESSAGE);
    }

    #[test]
    fn unschedulable_pods_say_why() {
        let mut pod = fixtures::pending_pod("chat-1", None);
        pod.status.get_or_insert_default().conditions =
            Some(vec![k8s_openapi::api::core::v1::PodCondition {
                type_: "PodScheduled".into(),
                status: "False".into(),
                reason: Some("Unschedulable".into()),
                message: Some("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.".into()),
                ..Default::default()
            }]);
        let PodState::Waiting { detail, .. } = classify(&pod) else {
            panic!()
        };
        assert_eq!(
            detail.as_deref(),
            Some("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
        );
    }

    #[test]
    fn pods_kubernetes_ended_are_disruptions_not_failures() {
        let failed = |reason: Option<&str>, condition: bool, deleting: bool| {
            let mut pod = fixtures::as_failed(
                fixtures::pending_pod("chat-1", Some("a-1")),
                "a-1",
                "Error",
                137,
                "",
            );
            let status = pod.status.as_mut().unwrap();
            status.reason = reason.map(str::to_string);
            if condition {
                status.conditions = Some(vec![k8s_openapi::api::core::v1::PodCondition {
                    type_: "DisruptionTarget".to_string(),
                    status: "True".to_string(),
                    reason: Some("PreemptionByScheduler".to_string()),
                    ..Default::default()
                }]);
            }
            if deleting {
                pod.metadata.deletion_timestamp =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                    ));
            }
            classify(&pod)
        };
        let is_disruption = |state: PodState| matches!(state, PodState::Disrupted { .. });
        assert!(is_disruption(failed(Some("Evicted"), false, false)));
        assert!(is_disruption(failed(Some("Preempting"), false, false)));
        assert!(is_disruption(failed(Some("Terminated"), false, false)));
        assert!(is_disruption(failed(
            Some("DeletionByTaintManager"),
            false,
            false
        )));
        assert!(
            is_disruption(failed(None, true, false)),
            "DisruptionTarget condition"
        );
        assert!(
            is_disruption(failed(None, false, true)),
            "deleted under the job"
        );
        assert!(matches!(
            failed(None, false, false),
            PodState::Failed { .. }
        ));
    }

    /// Pods a real kubelet (v1.32.13) refused at admission, as it wrote their status: more
    /// GPUs than the node has, an unsafe sysctl, a node affinity the node does not match
    /// (created with `spec.nodeName` set, so no scheduler filtered them first).
    const KUBELET_REFUSALS: &str = include_str!("outcome/testdata/kubelet_refusals.json");

    #[test]
    fn refusals_a_real_kubelet_wrote_are_admission_refusals() {
        let pods: Vec<Pod> = serde_json::from_str(KUBELET_REFUSALS).unwrap();
        let reasons: Vec<String> = pods
            .iter()
            .filter_map(|p| p.status.as_ref()?.reason.clone())
            .collect();
        assert_eq!(
            reasons,
            ["OutOfnvidia.com/gpu", "SysctlForbidden", "NodeAffinity"]
        );
        for pod in &pods {
            let state = classify(pod);
            let PodState::AdmissionRefused { node, message } = &state else {
                panic!("{:?}: {state:?}", pod.metadata.name);
            };
            assert_eq!(node.as_deref(), Some("gpu-node-1"));
            assert!(message.contains("Pod was rejected"), "{message}");
            assert!(state.is_finished());
        }
    }

    #[test]
    fn pods_the_kubelet_refused_at_admission_are_not_disruptions() {
        let refused = |reason: &str, deleting: bool| {
            let mut pod = fixtures::refused_pod("chat-1", "a-1", reason);
            if deleting {
                pod.metadata.deletion_timestamp =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                    ));
            }
            classify(&pod)
        };
        for reason in [
            "UnexpectedAdmissionError",
            "OutOfnvidia.com/gpu",
            "OutOfcpu",
            "OutOfmemory",
            "NodeAffinity",
            "TopologyAffinityError",
            "PodLevelResourcesNotSupported",
            "EmptyPodSharedPoolError",
        ] {
            assert_eq!(
                refused(reason, false),
                PodState::AdmissionRefused {
                    node: Some("a-1".into()),
                    message: format!("{reason}: Pod was rejected: {reason}"),
                },
                "{reason}"
            );
            assert!(refused(reason, false).is_finished());
            // Deleting the refused pod afterwards does not make the refusal an eviction.
            assert!(matches!(
                refused(reason, true),
                PodState::AdmissionRefused { .. }
            ));
        }
        // An eviction stays a disruption, replaced at once.
        assert!(matches!(
            refused("Evicted", false),
            PodState::Disrupted { .. }
        ));
    }

    #[test]
    fn code_quoted_in_a_traceback_is_not_an_out_of_memory_report() {
        let log = "Traceback (most recent call last):\n  File \"/app/run.py\", line 12, in main\n    except torch.OutOfMemoryError:\nFileNotFoundError: /models/x";
        let pod = fixtures::as_failed(
            fixtures::pending_pod("chat-1", Some("a-1")),
            "a-1",
            "Error",
            1,
            log,
        );
        match classify(&pod) {
            PodState::Failed { message, .. } => {
                assert!(message.contains("FileNotFoundError"), "{message}")
            }
            other => panic!("not an OOM: {other:?}"),
        }
        let real = "  File \"/app/run.py\", line 40, in generate\n    out = model(x)\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB";
        let pod = fixtures::as_failed(
            fixtures::pending_pod("chat-1", Some("a-1")),
            "a-1",
            "Error",
            1,
            real,
        );
        assert!(matches!(classify(&pod), PodState::OutOfMemory { .. }));
    }
}
