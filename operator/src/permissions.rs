//! Every permission the operator's code uses, and nothing more. The Helm chart's RBAC is
//! compared with this list by a test, in both installs (every namespace, and
//! `operator.watchNamespaces`), so a new API call must be added here first.

/// Where a permission is needed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Cluster-wide in every install (a ClusterRole): cluster-scoped objects, and the reads
    /// that must see every namespace (every pod's GPUs count).
    Cluster,
    /// Where the InferenceJobs are: cluster-wide (the same ClusterRole) when the operator
    /// watches every namespace; with `--watch-namespaces`, a Role in each watched namespace.
    JobNamespaces,
    /// A Role in the namespace of the lease (`--lease-namespace`), only with `--leader-election`.
    LeaseNamespace,
}

/// How the operator is installed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Install {
    /// It reconciles InferenceJobs in every namespace (no `--watch-namespaces`).
    AllNamespaces,
    /// It reconciles only those of the namespaces `--watch-namespaces` lists.
    WatchedNamespaces,
}

/// What grants a permission in an install.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    /// The operator's ClusterRole.
    ClusterRole,
    /// A Role in each watched namespace.
    WatchedNamespaceRole,
    /// The Role in the lease namespace.
    LeaseNamespaceRole,
}

impl Scope {
    /// What grants a permission of this scope in `install`.
    pub fn granted_by(self, install: Install) -> Grant {
        match (self, install) {
            (Scope::Cluster, _) | (Scope::JobNamespaces, Install::AllNamespaces) => {
                Grant::ClusterRole
            }
            (Scope::JobNamespaces, Install::WatchedNamespaces) => Grant::WatchedNamespaceRole,
            (Scope::LeaseNamespace, _) => Grant::LeaseNamespaceRole,
        }
    }
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

/// The operator's permissions, in the order of the chart's rules. A resource appears once per
/// scope (pods: read cluster-wide, written where the jobs are).
pub const PERMISSIONS: &[Permission] = &[
    // Jobs are watched; only their status is written.
    Permission {
        api_group: "vramfit.io",
        resource: "inferencejobs",
        verbs: READ,
        scope: Scope::JobNamespaces,
    },
    Permission {
        api_group: "vramfit.io",
        resource: "inferencejobs/status",
        verbs: &["get", "patch"],
        scope: Scope::JobNamespaces,
    },
    // Pods carry an owner reference with blockOwnerDeletion: clusters that run the
    // OwnerReferencesPermissionEnforcement admission plugin (OpenShift, hardened clusters)
    // require update on the owner's finalizers to set it. Nothing else uses it.
    Permission {
        api_group: "vramfit.io",
        resource: "inferencejobs/finalizers",
        verbs: &["update"],
        scope: Scope::JobNamespaces,
    },
    // `serve.autoscaling`: the replicas, through the scale subresource (`writes/scale.rs`),
    // and the HPAs that keep the autoscaler out of a job (`load_reader.rs`).
    Permission {
        api_group: "vramfit.io",
        resource: "inferencejobs/scale",
        verbs: &["patch"],
        scope: Scope::JobNamespaces,
    },
    Permission {
        api_group: "autoscaling",
        resource: "horizontalpodautoscalers",
        verbs: &["list"],
        scope: Scope::JobNamespaces,
    },
    // `serve.inferencePool` (`writes/inference_pool.rs`): a server-side apply that may create.
    Permission {
        api_group: "inference.networking.k8s.io",
        resource: "inferencepools",
        verbs: &["create", "patch"],
        scope: Scope::JobNamespaces,
    },
    // Served jobs: the Service named after each job and, from two live replicas, its
    // PodDisruptionBudget, created (`create`; on a name taken, one `get` says whose it is),
    // server-side applied only onto the job's own (`patch`), watched so that a changed or
    // deleted one is put back; the budget is deleted below two live replicas. In their job's
    // namespace.
    // Groups (jobs with gpus.maxNodes above 1) also get a headless Service and a NetworkPolicy
    // per running group, named after it, created and watched the same way, and deleted once
    // the group no longer runs.
    Permission {
        api_group: "",
        resource: "services",
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
        scope: Scope::JobNamespaces,
    },
    Permission {
        api_group: "policy",
        resource: "poddisruptionbudgets",
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
        scope: Scope::JobNamespaces,
    },
    Permission {
        api_group: "networking.k8s.io",
        resource: "networkpolicies",
        verbs: &["get", "list", "watch", "create", "patch", "delete"],
        scope: Scope::JobNamespaces,
    },
    Permission {
        api_group: "vramfit.io",
        resource: "gpunodeclasses",
        verbs: READ,
        scope: Scope::Cluster,
    },
    // Every pod of the cluster is watched for the GPUs it takes (any pod bound to a node
    // counts), the jobs' own pods by label.
    Permission {
        api_group: "",
        resource: "pods",
        verbs: READ,
        scope: Scope::Cluster,
    },
    // Workload pods: created for each attempt, server-side applied when only their metadata
    // changes, deleted on a spec change; always in their job's namespace.
    Permission {
        api_group: "",
        resource: "pods",
        verbs: &["create", "patch", "delete"],
        scope: Scope::JobNamespaces,
    },
    Permission {
        api_group: "",
        resource: "nodes",
        verbs: READ,
        scope: Scope::Cluster,
    },
    // The event recorder creates events (in the job's namespace) and patches their series.
    Permission {
        api_group: "events.k8s.io",
        resource: "events",
        verbs: &["create", "patch"],
        scope: Scope::JobNamespaces,
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

/// With `--hub-token-secret NAME` only: `get` on that one Secret in the operator's own
/// namespace (a Role with `resourceNames: [NAME]`, chart value `operator.hub.tokenSecret`),
/// the Hub token for `model.huggingFace`, used only for the jobs of `--hub-token-namespaces`.
/// Not in [`PERMISSIONS`]: the default install reads no Secret at all.
pub const HUB_TOKEN_SECRET: Permission = Permission {
    api_group: "",
    resource: "secrets",
    verbs: &["get"],
    scope: Scope::LeaseNamespace,
};

/// With `--model-cache` only (chart value `modelCache.enabled`): each GPU node's ModelCache
/// (watched; its spec server-side applied, which needs `create` the first time), the cached
/// models' PersistentVolumes (created; listed and deleted once released — what the operator
/// may create is narrowed by the chart's `model-cache-volume-guard` admission policy), and
/// the jobs' claims on them (created; one `get` when the name is taken; deleted with their
/// job by the garbage collector), where the jobs are. Not in [`PERMISSIONS`]: the default
/// install grants none of them.
pub const MODEL_CACHE: &[Permission] = &[
    Permission {
        api_group: "vramfit.io",
        resource: "modelcaches",
        verbs: &["list", "watch", "create", "patch"],
        scope: Scope::Cluster,
    },
    Permission {
        api_group: "",
        resource: "persistentvolumes",
        verbs: &["list", "create", "delete"],
        scope: Scope::Cluster,
    },
    Permission {
        api_group: "",
        resource: "persistentvolumeclaims",
        verbs: &["get", "create"],
        scope: Scope::JobNamespaces,
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_wildcards_and_no_duplicates() {
        for (i, p) in PERMISSIONS.iter().enumerate() {
            assert!(!p.verbs.contains(&"*") && p.resource != "*");
            for q in &PERMISSIONS[..i] {
                if (q.api_group, q.resource) == (p.api_group, p.resource) {
                    assert_ne!(q.scope, p.scope, "{} twice in one scope", p.resource);
                    assert!(
                        q.verbs.iter().all(|verb| !p.verbs.contains(verb)),
                        "{}: a verb in two scopes",
                        p.resource
                    );
                }
            }
        }
        let status = PERMISSIONS
            .iter()
            .find(|p| p.resource == "inferencejobs/status")
            .unwrap();
        assert_eq!(status.verbs, ["get", "patch"]);
    }

    /// With `--watch-namespaces` nothing that writes is cluster-wide, and what stays
    /// cluster-wide is reads: cluster-scoped objects, and every pod for GPU accounting.
    #[test]
    fn watching_listed_namespaces_needs_only_reads_cluster_wide() {
        let cluster_wide: Vec<(&str, &[&str])> = PERMISSIONS
            .iter()
            .filter(|p| p.scope.granted_by(Install::WatchedNamespaces) == Grant::ClusterRole)
            .map(|p| (p.resource, p.verbs))
            .collect();
        assert_eq!(
            cluster_wide,
            [
                ("gpunodeclasses", READ),
                ("pods", READ),
                ("nodes", READ),
                ("customresourcedefinitions", READ),
            ]
        );
        let in_watched: Vec<&str> = PERMISSIONS
            .iter()
            .filter(|p| {
                p.scope.granted_by(Install::WatchedNamespaces) == Grant::WatchedNamespaceRole
            })
            .map(|p| p.resource)
            .collect();
        assert_eq!(
            in_watched,
            [
                "inferencejobs",
                "inferencejobs/status",
                "inferencejobs/finalizers",
                "inferencejobs/scale",
                "horizontalpodautoscalers",
                "inferencepools",
                "services",
                "poddisruptionbudgets",
                "networkpolicies",
                "pods",
                "events"
            ]
        );
        assert!(
            PERMISSIONS
                .iter()
                .filter(|p| p.scope != Scope::LeaseNamespace)
                .all(|p| p.scope.granted_by(Install::AllNamespaces) == Grant::ClusterRole),
            "watching every namespace, one ClusterRole grants all but the lease"
        );
    }
}
