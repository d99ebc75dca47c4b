//! A group's NetworkPolicy (pure): the group's pods accept traffic only from the group's own
//! pods. The ranks' ports (Ray's GCS, llama.cpp's `rpc-server`, the torchrun rendezvous) have
//! no authentication of their own; llama.cpp's `rpc-server` runs whatever it is sent.
//! Enforcement is the cluster's network plugin's: one that ignores NetworkPolicies (a plain
//! bridge) leaves the ports open.
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use vramfit_api::InferenceJob;

use super::service::{group_object_labels, group_selector};
use crate::reconcile::build::BuildError;
use crate::serving::service::{controlled_by, labels_hold, owner};

/// The NetworkPolicy of `group`, a group of `job`'s: it selects the group's pods, and lets in
/// only the group's pods.
pub fn desired_network_policy(
    job: &InferenceJob,
    group: &str,
) -> Result<NetworkPolicy, BuildError> {
    network_policy_of(job, group, None)
}

/// The NetworkPolicy of `group`, a served replica's group: as [`desired_network_policy`], and
/// the server's `port` (TCP) open to any client, as the job's Service sends them there (the
/// leader serves on it; a worker listens on it for nothing).
pub fn desired_served_network_policy(
    job: &InferenceJob,
    group: &str,
    port: u16,
) -> Result<NetworkPolicy, BuildError> {
    network_policy_of(job, group, Some(port))
}

fn network_policy_of(
    job: &InferenceJob,
    group: &str,
    served_port: Option<u16>,
) -> Result<NetworkPolicy, BuildError> {
    let namespace = job
        .namespace()
        .ok_or(BuildError::MissingObjectKey("metadata.namespace"))?;
    let members = LabelSelector {
        match_labels: Some(group_selector(group)),
        match_expressions: None,
    };
    Ok(NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(group.to_string()),
            namespace: Some(namespace),
            labels: Some(group_object_labels(job, group)),
            owner_references: Some(vec![owner(job)?]),
            ..ObjectMeta::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(members.clone()),
            policy_types: Some(vec!["Ingress".to_string()]),
            ingress: Some(
                std::iter::once(NetworkPolicyIngressRule {
                    from: Some(vec![NetworkPolicyPeer {
                        pod_selector: Some(members),
                        ..NetworkPolicyPeer::default()
                    }]),
                    ports: None,
                })
                .chain(served_port.map(|port| NetworkPolicyIngressRule {
                    from: None,
                    ports: Some(vec![NetworkPolicyPort {
                        port: Some(IntOrString::Int(i32::from(port))),
                        protocol: Some("TCP".to_string()),
                        end_port: None,
                    }]),
                }))
                .collect(),
            ),
            egress: None,
        }),
    })
}

/// Whether the policy the store shows is the job's (by uid) and says what vramfit sets.
pub fn as_desired(observed: &NetworkPolicy, desired: &NetworkPolicy, job: &InferenceJob) -> bool {
    controlled_by(observed.owner_references(), job)
        && observed.spec == desired.spec
        && labels_hold(observed.labels(), desired.labels())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::testing::group_job;
    use serde_json::json;

    #[test]
    fn the_policy_selects_the_group_and_admits_only_the_group() {
        let job = group_job("big", 2);
        let policy = desired_network_policy(&job, "big-1").unwrap();
        assert_eq!(policy.name_any(), "big-1");
        assert_eq!(policy.owner_references()[0].controller, Some(true));
        assert_eq!(
            serde_json::to_value(policy.spec.as_ref().unwrap()).unwrap(),
            json!({
                "podSelector": { "matchLabels": { "vramfit.io/group": "big-1" } },
                "policyTypes": ["Ingress"],
                "ingress": [{ "from": [{ "podSelector": { "matchLabels": { "vramfit.io/group": "big-1" } } }] }]
            })
        );
        assert!(as_desired(&policy, &policy, &job));
        let mut opened = policy.clone();
        opened.spec.as_mut().unwrap().ingress = Some(vec![NetworkPolicyIngressRule::default()]);
        assert!(!as_desired(&opened, &policy, &job), "an edit is put back");
    }

    #[test]
    fn a_served_group_s_policy_also_opens_the_server_s_port_to_its_clients() {
        let job = group_job("chat", 2);
        let policy = desired_served_network_policy(&job, "chat-r0-1", 8000).unwrap();
        assert_eq!(
            serde_json::to_value(policy.spec.as_ref().unwrap()).unwrap(),
            json!({
                "podSelector": { "matchLabels": { "vramfit.io/group": "chat-r0-1" } },
                "policyTypes": ["Ingress"],
                "ingress": [
                    { "from": [{ "podSelector": { "matchLabels": { "vramfit.io/group": "chat-r0-1" } } }] },
                    { "ports": [{ "port": 8000, "protocol": "TCP" }] }
                ]
            })
        );
    }
}
