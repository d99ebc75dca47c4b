//! Extended resources a job's pod asks for (pure): `spec.pod.resources` passes through to the
//! pod, and a resource that no node of a class offers (`example.com/fpga: 1` on GPU nodes
//! without one) makes the pod unschedulable there. Such a class is rejected up front, with
//! the resource named, rather than tried (see also the schedule deadline, for what cannot be
//! known up front).
//!
//! Extended resources are the fully qualified resource names outside the `kubernetes.io`
//! domain (Kubernetes' definition); the GPU resources vramfit requests itself are left to
//! room ([`crate::capacity::room`]).
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use vramfit_api::InferenceJob;
use vramfit_api::labels::is_gpu_resource;

/// Whether `name` is an extended resource other than a GPU resource vramfit requests itself.
pub fn is_extended_resource(name: &str) -> bool {
    let Some((domain, _)) = name.split_once('/') else {
        return false;
    };
    let native = domain == "kubernetes.io" || domain.ends_with(".kubernetes.io");
    !native && !is_gpu_resource(name)
}

/// The count in an extended resource's quantity (they are whole numbers); anything else asks
/// for at least one.
fn count(quantity: &str) -> u64 {
    quantity.trim().parse::<u64>().unwrap_or(1)
}

/// The extended resources the job's pod requests, by name: the larger of request and limit.
pub fn requested(job: &InferenceJob) -> BTreeMap<String, u64> {
    let mut wanted = BTreeMap::new();
    let resources = job.spec.pod.as_ref().and_then(|p| p.resources.as_ref());
    let quantities = resources
        .into_iter()
        .flat_map(|r| r.requests.iter().chain(r.limits.iter()))
        .flatten();
    for (name, quantity) in quantities {
        if is_extended_resource(name) {
            let count = count(&quantity.0);
            if count > 0 {
                let held = wanted.entry(name.clone()).or_insert(0);
                *held = count.max(*held);
            }
        }
    }
    wanted
}

/// A node's allocatable extended resources (none while no device plugin has reported one).
pub fn allocatable(node: &Node) -> BTreeMap<String, u64> {
    node.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .into_iter()
        .flatten()
        .filter(|(name, _)| is_extended_resource(name))
        .map(|(name, quantity)| (name.clone(), quantity.0.trim().parse().unwrap_or(0)))
        .filter(|(_, count)| *count > 0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    #[test]
    fn extended_resources_are_those_outside_kubernetes_io_and_not_vramfits_gpus() {
        for name in [
            "example.com/never",
            "xilinx.com/fpga",
            "smarter-devices/fuse",
        ] {
            assert!(is_extended_resource(name), "{name}");
        }
        for name in [
            "cpu",
            "memory",
            "ephemeral-storage",
            "hugepages-2Mi",
            "kubernetes.io/batch-cpu",
            "node.kubernetes.io/x",
            "nvidia.com/gpu",
            "nvidia.com/gpu.shared",
            "nvidia.com/mig-3g.40gb",
        ] {
            assert!(!is_extended_resource(name), "{name}");
        }
    }

    #[test]
    fn a_job_asks_for_the_larger_of_request_and_limit() {
        let mut job = fixtures::job("chat", fixtures::vllm_mistral_spec());
        let quantities = |pairs: &[(&str, &str)]| {
            Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect(),
            )
        };
        job.spec.pod.get_or_insert_default().resources = Some(ResourceRequirements {
            requests: quantities(&[
                ("example.com/never", "1"),
                ("memory", "8Gi"),
                ("xilinx.com/fpga", "0"),
            ]),
            limits: quantities(&[("example.com/never", "2"), ("nvidia.com/gpu", "4")]),
            ..ResourceRequirements::default()
        });
        assert_eq!(
            requested(&job),
            BTreeMap::from([("example.com/never".to_string(), 2)])
        );
        assert!(requested(&fixtures::job("plain", fixtures::vllm_mistral_spec())).is_empty());
    }
}
