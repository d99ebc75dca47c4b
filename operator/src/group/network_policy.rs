//! A group's NetworkPolicy (pure): the group's pods accept traffic only from the group's own
//! pods. The ranks' ports (Ray's GCS, llama.cpp's `rpc-server`, the torchrun rendezvous) have
//! no authentication of their own; llama.cpp's `rpc-server` runs whatever it is sent.
//! Enforcement is the cluster's network plugin's: one that ignores NetworkPolicies (a plain
//! bridge) leaves the ports open.
use std::collections::BTreeMap;

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use vramfit_api::InferenceJob;
use vramfit_api::pod_keys::GROUP_RANK_LABEL;

use super::service::{group_object_labels, group_selector};
use crate::pod::build::BuildError;
use crate::replicas::service::{controlled_by, labels_hold, owner};

/// The NetworkPolicy of `group`, a group of `job`'s: it selects the group's pods, and lets in
/// only the group's pods (a served group's too: its leader's port is opened by
/// [`desired_leader_network_policy`]).
pub fn desired_network_policy(
    job: &InferenceJob,
    group: &str,
) -> Result<NetworkPolicy, BuildError> {
    network_policy_of(job, group)
}

/// The name of the NetworkPolicy that opens a served group's port on its leader.
pub fn leader_policy_name(group: &str) -> String {
    format!("{group}-leader")
}

/// The NetworkPolicy `<group>-leader` of `group`, a served replica's group: it selects the
/// leader (rank 0) alone and lets any client in on the server's `port` (TCP), as the job's
/// Service sends them there. A policy of its own, because a rule applies to every pod its
/// policy selects: in the group's policy it would open the port on the workers too, whose
/// ranks' ports listen there with no authentication. The group's policy
/// ([`desired_network_policy`]) still guards the leader's other ports.
pub fn desired_leader_network_policy(
    job: &InferenceJob,
    group: &str,
    port: u16,
) -> Result<NetworkPolicy, BuildError> {
    let mut leader = group_selector(group);
    leader.insert(GROUP_RANK_LABEL.to_string(), "0".to_string());
    let rule = NetworkPolicyIngressRule {
        from: None,
        ports: Some(vec![NetworkPolicyPort {
            port: Some(IntOrString::Int(i32::from(port))),
            protocol: Some("TCP".to_string()),
            end_port: None,
        }]),
    };
    policy_of(job, leader_policy_name(group), group, leader, rule)
}

fn network_policy_of(job: &InferenceJob, group: &str) -> Result<NetworkPolicy, BuildError> {
    let members = LabelSelector {
        match_labels: Some(group_selector(group)),
        match_expressions: None,
    };
    let rule = NetworkPolicyIngressRule {
        from: Some(vec![NetworkPolicyPeer {
            pod_selector: Some(members),
            ..NetworkPolicyPeer::default()
        }]),
        ports: None,
    };
    policy_of(job, group.to_string(), group, group_selector(group), rule)
}

/// A policy `name` of `job`'s group `group`: ingress only, to the pods `selects` matches,
/// through `rule` alone.
fn policy_of(
    job: &InferenceJob,
    name: String,
    group: &str,
    selects: BTreeMap<String, String>,
    rule: NetworkPolicyIngressRule,
) -> Result<NetworkPolicy, BuildError> {
    let namespace = job
        .namespace()
        .ok_or(BuildError::MissingObjectKey("metadata.namespace"))?;
    Ok(NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace),
            labels: Some(group_object_labels(job, group)),
            owner_references: Some(vec![owner(job)?]),
            ..ObjectMeta::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(selects),
                match_expressions: None,
            }),
            policy_types: Some(vec!["Ingress".to_string()]),
            ingress: Some(vec![rule]),
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
    fn a_served_group_s_port_is_opened_on_its_leader_alone() {
        let job = group_job("chat", 2);
        let members = desired_network_policy(&job, "chat-r0-1").unwrap();
        assert_eq!(
            serde_json::to_value(members.spec.as_ref().unwrap()).unwrap()["ingress"],
            json!([{ "from": [{ "podSelector": { "matchLabels": { "vramfit.io/group": "chat-r0-1" } } }] }]),
            "no port open to other clients on any member"
        );
        let leader = desired_leader_network_policy(&job, "chat-r0-1", 8000).unwrap();
        assert_eq!(leader.name_any(), "chat-r0-1-leader");
        assert_eq!(leader.labels()["vramfit.io/group"], "chat-r0-1");
        assert_eq!(leader.owner_references()[0].controller, Some(true));
        assert_eq!(
            serde_json::to_value(leader.spec.as_ref().unwrap()).unwrap(),
            json!({
                "podSelector": { "matchLabels": {
                    "vramfit.io/group": "chat-r0-1", "vramfit.io/group-rank": "0" } },
                "policyTypes": ["Ingress"],
                "ingress": [{ "ports": [{ "port": 8000, "protocol": "TCP" }] }]
            })
        );
    }
}
