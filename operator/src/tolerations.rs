//! The tolerations of a job's pod (pure): vramfit's GPU toleration, then the job's own, with
//! any toleration of a node that stopped answering (`not-ready`, `unreachable`) bounded in
//! time. A pod that tolerates those forever keeps its GPUs reserved on a node that is gone,
//! and the job never learns that its attempt ended.
use k8s_openapi::api::core::v1::Toleration;
use vramfit_api::labels::GPU_RESOURCE;

/// The taints the node lifecycle controller puts on a node that stopped answering.
const NODE_LIFECYCLE_KEYS: [&str; 2] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
];

/// The longest a pod stays on such a node: what Kubernetes' `DefaultTolerationSeconds`
/// admission gives every pod that says nothing.
pub const MAX_NO_EXECUTE_SECONDS: i64 = 300;

/// Tolerates the taint GPU nodes commonly carry.
pub fn gpu_toleration() -> Toleration {
    Toleration {
        key: Some(GPU_RESOURCE.to_string()),
        operator: Some("Exists".to_string()),
        effect: Some("NoSchedule".to_string()),
        ..Toleration::default()
    }
}

/// `gpu` first, then the job's own tolerations (duplicates dropped), bounded.
pub fn pod_tolerations(gpu: Toleration, job: &[Toleration]) -> Vec<Toleration> {
    let mut all = vec![gpu];
    for toleration in job.iter().flat_map(bounded) {
        if !all.contains(&toleration) {
            all.push(toleration);
        }
    }
    all
}

/// One toleration as the pod gets it: one that tolerates a node-lifecycle taint with effect
/// NoExecute gets at most [`MAX_NO_EXECUTE_SECONDS`]. A toleration of every effect is split
/// by effect, since only a NoExecute toleration may carry seconds.
fn bounded(toleration: &Toleration) -> Vec<Toleration> {
    let key = toleration.key.as_deref().unwrap_or_default();
    let exists = toleration.operator.as_deref() == Some("Exists");
    let covers_lifecycle = (key.is_empty() && exists) || NODE_LIFECYCLE_KEYS.contains(&key);
    let effect = toleration.effect.as_deref().unwrap_or_default();
    if !covers_lifecycle || !matches!(effect, "" | "NoExecute") {
        return vec![toleration.clone()];
    }
    let no_execute = Toleration {
        effect: Some("NoExecute".to_string()),
        toleration_seconds: Some(
            toleration
                .toleration_seconds
                .map_or(MAX_NO_EXECUTE_SECONDS, |s| s.min(MAX_NO_EXECUTE_SECONDS)),
        ),
        ..toleration.clone()
    };
    if effect == "NoExecute" {
        return vec![no_execute];
    }
    ["NoSchedule", "PreferNoSchedule"]
        .into_iter()
        .map(|effect| Toleration {
            effect: Some(effect.to_string()),
            ..toleration.clone()
        })
        .chain([no_execute])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toleration(
        key: Option<&str>,
        operator: &str,
        effect: Option<&str>,
        seconds: Option<i64>,
    ) -> Toleration {
        Toleration {
            key: key.map(String::from),
            operator: Some(operator.to_string()),
            effect: effect.map(String::from),
            toleration_seconds: seconds,
            value: None,
        }
    }

    fn gpu() -> Toleration {
        toleration(Some("nvidia.com/gpu"), "Exists", Some("NoSchedule"), None)
    }

    #[test]
    fn a_forever_toleration_of_an_unreachable_node_is_bounded() {
        let forever = toleration(
            Some("node.kubernetes.io/unreachable"),
            "Exists",
            Some("NoExecute"),
            None,
        );
        let long = toleration(
            Some("node.kubernetes.io/not-ready"),
            "Exists",
            Some("NoExecute"),
            Some(86_400),
        );
        let short = toleration(
            Some("node.kubernetes.io/not-ready"),
            "Exists",
            Some("NoExecute"),
            Some(30),
        );
        let tolerations = pod_tolerations(gpu(), &[forever, long, short]);
        let seconds: Vec<Option<i64>> = tolerations.iter().map(|t| t.toleration_seconds).collect();
        assert_eq!(seconds, [None, Some(300), Some(300), Some(30)]);
    }

    #[test]
    fn a_toleration_of_everything_is_split_by_effect() {
        let everything = toleration(None, "Exists", None, None);
        let tolerations = pod_tolerations(gpu(), &[everything]);
        let effects: Vec<(&str, Option<i64>)> = tolerations[1..]
            .iter()
            .map(|t| {
                (
                    t.effect.as_deref().unwrap_or_default(),
                    t.toleration_seconds,
                )
            })
            .collect();
        assert_eq!(
            effects,
            [
                ("NoSchedule", None),
                ("PreferNoSchedule", None),
                ("NoExecute", Some(300))
            ]
        );
        assert!(
            tolerations[1..]
                .iter()
                .all(|t| t.key.is_none() && t.operator.as_deref() == Some("Exists"))
        );
    }

    #[test]
    fn other_tolerations_pass_unchanged_and_duplicates_go() {
        let dedicated = toleration(Some("dedicated"), "Equal", Some("NoExecute"), None);
        let pool = toleration(Some("pool"), "Exists", None, None);
        let tolerations = pod_tolerations(gpu(), &[dedicated.clone(), pool.clone(), gpu()]);
        assert_eq!(tolerations, [gpu(), dedicated, pool]);
    }
}
