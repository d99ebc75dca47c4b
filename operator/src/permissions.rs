//! Every permission the operator's code uses, and nothing more. The Helm chart's RBAC is
//! compared with this list by a test, so a new API call must be added here first.

/// Where a permission is granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// A ClusterRole.
    Cluster,
    /// A Role in the namespace of the lease (`--lease-namespace`), only with `--leader-election`.
    LeaseNamespace,
}

/// One RBAC rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Permission {
    /// API group (`""` for the core group).
    pub api_group: &'static str,
    /// Resource (with `/subresource` where it is one).
    pub resource: &'static str,
    /// Verbs, sorted as Kubernetes lists them.
    pub verbs: &'static [&'static str],
    /// Where it is granted.
    pub scope: Scope,
}

const READ: &[&str] = &["get", "list", "watch"];

/// The operator's permissions, in the order of the chart's rules.
pub const PERMISSIONS: &[Permission] = &[
    // Jobs are watched; only their status is written.
    Permission {
        api_group: "vramfit.io",
        resource: "inferencejobs",
        verbs: READ,
        scope: Scope::Cluster,
    },
    Permission {
        api_group: "vramfit.io",
        resource: "inferencejobs/status",
        verbs: &["get", "patch"],
        scope: Scope::Cluster,
    },
    // Pods carry an owner reference with blockOwnerDeletion: clusters that run the
    // OwnerReferencesPermissionEnforcement admission plugin (OpenShift, hardened clusters)
    // require update on the owner's finalizers to set it. Nothing else uses it.
    Permission {
        api_group: "vramfit.io",
        resource: "inferencejobs/finalizers",
        verbs: &["update"],
        scope: Scope::Cluster,
    },
    Permission {
        api_group: "vramfit.io",
        resource: "gpunodeclasses",
        verbs: READ,
        scope: Scope::Cluster,
    },
    // Workload pods: created for each attempt, server-side applied when only their metadata
    // changes, deleted on a spec change; every pod is watched for the GPUs it takes.
    Permission {
        api_group: "",
        resource: "pods",
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
        scope: Scope::Cluster,
    },
    Permission {
        api_group: "",
        resource: "nodes",
        verbs: READ,
        scope: Scope::Cluster,
    },
    // The event recorder creates events and patches their series.
    Permission {
        api_group: "events.k8s.io",
        resource: "events",
        verbs: &["create", "patch"],
        scope: Scope::Cluster,
    },
    // Start-up waits until the CRDs are established.
    Permission {
        api_group: "apiextensions.k8s.io",
        resource: "customresourcedefinitions",
        verbs: READ,
        scope: Scope::Cluster,
    },
    // kube-lease-manager reads, creates and server-side applies the Lease.
    Permission {
        api_group: "coordination.k8s.io",
        resource: "leases",
        verbs: &["get", "list", "watch", "create", "update", "patch"],
        scope: Scope::LeaseNamespace,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_wildcards_and_no_duplicates() {
        for (i, p) in PERMISSIONS.iter().enumerate() {
            assert!(!p.verbs.contains(&"*") && p.resource != "*");
            assert!(
                PERMISSIONS[..i]
                    .iter()
                    .all(|q| (q.api_group, q.resource) != (p.api_group, p.resource))
            );
        }
        let status = PERMISSIONS
            .iter()
            .find(|p| p.resource == "inferencejobs/status")
            .unwrap();
        assert_eq!(status.verbs, ["get", "patch"]);
    }
}
