//! The names vramfit gives workload pods and the labels and annotations it puts on them: the
//! operator writes them, the e2e suite, dashboards and `kubectl -l` read them.

/// The workload container's name.
pub const CONTAINER_NAME: &str = "inference";
/// Label on every pod: the job it runs (the job's name, hashed down to 63 characters if longer).
pub const JOB_LABEL: &str = "vramfit.io/job";
/// Label on every pod: its attempt number (1 for the first pod).
pub const ATTEMPT_LABEL: &str = "vramfit.io/attempt";
/// Label on every pod: the node class it was planned for.
pub const NODE_CLASS_LABEL: &str = "vramfit.io/node-class";
/// Label on a served replica's pod: the sequences it serves at once as planned for its class
/// (the unit its load is measured in; a gateway's endpoint picker can weigh it).
pub const CONCURRENCY_LABEL: &str = "vramfit.io/concurrency";
/// Label on a served replica's pod: the GPU product of the class it was planned for (what a
/// gateway's endpoint picker can score on, with its class and concurrency).
pub const GPU_PRODUCT_LABEL: &str = "vramfit.io/gpu-product";
/// Annotation on every pod: its plan as JSON, so a restarted operator can adopt a pod it
/// created before its status write landed.
pub const PLAN_ANNOTATION: &str = "vramfit.io/plan";
/// Annotation on every pod: a hash of its spec; a spec change that keeps it needs no new pod.
pub const SPEC_HASH_ANNOTATION: &str = "vramfit.io/spec-hash";
/// A served pod's LoRA adapters, by name, comma-separated, in llama.cpp's id order (a
/// request's `"lora": [{"id": i, "scale": 1.0}]` picks the i-th).
pub const ADAPTERS_ANNOTATION: &str = "vramfit.io/adapters";
/// A served pod's label per adapter it serves (`adapter.vramfit.io/<name>: "true"`), for an
/// endpoint picker's selector.
pub const ADAPTER_LABEL_PREFIX: &str = "adapter.vramfit.io/";
/// Annotation on a group's leader created after its workers (llama.cpp): the addresses its
/// host aliases pin, `<worker's DNS name>=<pod IP>` comma-separated (the operator's pod cache
/// keeps annotations, not `spec.hostAliases`): a worker no longer at its address ends the
/// group.
pub const WORKER_ADDRESSES_ANNOTATION: &str = "vramfit.io/worker-addresses";
/// Label on a served job's pods: the replica's slot (its identity across the pods that serve
/// for it).
pub const REPLICA_LABEL: &str = "vramfit.io/replica";
/// Label on a served job's pods and the Service's selector: the job's uid, so that the
/// Service selects exactly this job's pods (not those of an earlier job of the same name).
pub const JOB_UID_LABEL: &str = "vramfit.io/job-uid";
/// Label on every pod of a group (a plan that spans nodes) and its headless Service and
/// NetworkPolicy: the group's name ([`group_name`]).
pub const GROUP_LABEL: &str = "vramfit.io/group";
/// Label on every pod of a group: its rank, `0` for the leader.
pub const GROUP_RANK_LABEL: &str = "vramfit.io/group-rank";
/// `app.kubernetes.io/name` of every workload pod.
pub const APP_NAME: &str = "vramfit-job";
/// The recommended labels the operator sets on every pod (`app.kubernetes.io/`).
pub const APP_NAME_LABEL: &str = "app.kubernetes.io/name";
/// Label on every pod: the job it runs, like [`JOB_LABEL`].
pub const APP_INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// Label on every pod: the operator's field manager.
pub const APP_MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Label on every pod: `inference`.
pub const APP_COMPONENT_LABEL: &str = "app.kubernetes.io/component";

/// Longest pod name vramfit creates (a DNS label, so the name can double as a hostname).
const MAX_NAME: usize = 63;

/// The name of a job's pod for `attempt`: `<job>-<attempt>`, or, for long job names, a
/// truncated name with a hash of the full one so that distinct jobs never share a pod name.
pub fn pod_name(job_name: &str, attempt: u32) -> String {
    name_with_suffix(job_name, &format!("-{attempt}"))
}

/// The name of a served job's pod number `incarnation` of replica `slot`:
/// `<job>-r<slot>-<incarnation>` (long job names truncated with a hash, as [`pod_name`]).
pub fn replica_pod_name(job_name: &str, slot: u32, incarnation: u32) -> String {
    name_with_suffix(job_name, &format!("-r{slot}-{incarnation}"))
}

/// The name of a batch job's group for `attempt` (also its headless Service and
/// NetworkPolicy): the attempt's pod name, `<job>-<attempt>`.
pub fn group_name(job_name: &str, attempt: u32) -> String {
    pod_name(job_name, attempt)
}

/// The name of rank `rank`'s pod in a batch job's group for `attempt`:
/// `<job>-<attempt>-<rank>` (long job names truncated with a hash, as [`pod_name`]).
pub fn group_pod_name(job_name: &str, attempt: u32, rank: u32) -> String {
    name_with_suffix(job_name, &format!("-{attempt}-{rank}"))
}

/// The name of the group that serves as pod number `incarnation` of a served job's replica
/// `slot` (also its headless Service and NetworkPolicy): the replica's pod name,
/// `<job>-r<slot>-<incarnation>`.
pub fn replica_group_name(job_name: &str, slot: u32, incarnation: u32) -> String {
    replica_pod_name(job_name, slot, incarnation)
}

/// The name of rank `rank`'s pod in the group of a served job's replica `slot`, number
/// `incarnation`: `<job>-r<slot>-<incarnation>-<rank>` (long job names truncated with a hash,
/// as [`pod_name`]).
pub fn replica_group_pod_name(job_name: &str, slot: u32, incarnation: u32, rank: u32) -> String {
    name_with_suffix(job_name, &format!("-r{slot}-{incarnation}-{rank}"))
}

fn name_with_suffix(job_name: &str, suffix: &str) -> String {
    let plain = format!("{job_name}{suffix}");
    if plain.len() <= MAX_NAME {
        return plain;
    }
    let hash = format!("-{:08x}", fnv1a64(job_name.as_bytes()) as u32);
    let room = MAX_NAME - suffix.len() - hash.len();
    let prefix = truncate_name(job_name, room);
    format!("{prefix}{hash}{suffix}")
}

/// `name` as a label value: itself when it is one, else truncated with a hash.
pub fn label_value(name: &str) -> String {
    if crate::labels::is_valid_label_value(name) {
        return name.to_string();
    }
    let hash = format!("-{:08x}", fnv1a64(name.as_bytes()) as u32);
    let prefix = truncate_name(name, MAX_NAME - hash.len());
    let value = format!("{prefix}{hash}");
    if crate::labels::is_valid_label_value(&value) {
        value
    } else {
        crate::labels::to_label_value(&value)
    }
}

fn truncate_name(name: &str, max: usize) -> String {
    let cut: String = name.chars().take(max).collect();
    let trimmed = cut.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    if trimmed.is_empty() {
        "job".to_string()
    } else {
        trimmed.to_string()
    }
}

/// 64-bit FNV-1a: small, stable, good enough to tell specs and names apart.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_stay_short_and_distinct() {
        assert_eq!(pod_name("chat", 3), "chat-3");
        let long_a = "a".repeat(80);
        let long_b = format!("{}b", "a".repeat(79));
        let (a, b) = (pod_name(&long_a, 1), pod_name(&long_b, 1));
        assert!(a.len() <= 63 && b.len() <= 63, "{a} {b}");
        assert_ne!(a, b);
        assert!(a.ends_with("-1"));
        assert_eq!(pod_name(&long_a, 1), a, "deterministic");
        let value = label_value(&long_a);
        assert!(crate::labels::is_valid_label_value(&value), "{value}");
        assert_eq!(label_value("chat"), "chat");
        assert_eq!(replica_pod_name("chat", 2, 7), "chat-r2-7");
        let replica = replica_pod_name(&long_a, 12, 345);
        assert!(
            replica.len() <= 63 && replica.ends_with("-r12-345"),
            "{replica}"
        );
        assert_ne!(replica, replica_pod_name(&long_b, 12, 345));
        assert_eq!(replica_group_name("chat", 2, 7), "chat-r2-7");
        assert_eq!(replica_group_pod_name("chat", 2, 7, 1), "chat-r2-7-1");
        let member = replica_group_pod_name(&long_a, 12, 345, 15);
        assert!(
            member.len() <= 63 && member.ends_with("-r12-345-15"),
            "{member}"
        );
    }
}
