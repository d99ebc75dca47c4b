//! `spec.pod.securityContext`: the identity a job may choose for its pod. The rest of the
//! pod's security context is vramfit's, fixed to what Pod Security `restricted` accepts.
use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// Who the workload runs as. vramfit always adds what Pod Security `restricted` asks of every
/// pod (seccomp `RuntimeDefault`, no privilege escalation, every capability dropped); in a
/// `restricted` namespace the job must also run as non-root: `runAsUser` with a non-zero UID
/// (which implies `runAsNonRoot: true`), or `runAsNonRoot: true` with an image whose `USER`
/// is a non-zero numeric UID.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[x_kube(validation = Rule::new("!(has(self.runAsUser) && self.runAsUser == 0 && has(self.runAsNonRoot) && self.runAsNonRoot)").message("securityContext: runAsNonRoot true contradicts runAsUser 0"))]
#[serde(rename_all = "camelCase")]
pub struct PodSecurity {
    /// UID the workload's processes run as (the image's `USER` when unset). A non-zero UID
    /// also sets `runAsNonRoot: true` unless `runAsNonRoot` says otherwise. 0 to 2^31 − 1, as
    /// the pod's own field allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2147483647))]
    pub run_as_user: Option<i64>,
    /// Primary GID of the workload's processes, 0 to 2^31 − 1 as the pod's own field allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2147483647))]
    pub run_as_group: Option<i64>,
    /// `true`: the kubelet refuses to start the container as UID 0 (required by Pod Security
    /// `restricted`). Unset: as `runAsUser` implies, else the image decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_non_root: Option<bool>,
    /// Supplementary GID that owns the pod's volumes (so a non-root workload can write them),
    /// 0 to 2^31 − 1 as the pod's own field allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2147483647))]
    pub fs_group: Option<i64>,
}

impl PodSecurity {
    /// `runAsNonRoot` as the pod gets it: the job's, or `true` when it names a non-zero UID
    /// (the check then always passes, and Pod Security `restricted` asks for the field).
    pub fn effective_run_as_non_root(&self) -> Option<bool> {
        self.run_as_non_root
            .or_else(|| self.run_as_user.is_some_and(|uid| uid != 0).then_some(true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_non_zero_uid_implies_non_root_unless_the_job_says_otherwise() {
        let uid = |run_as_user, run_as_non_root| PodSecurity {
            run_as_user,
            run_as_non_root,
            ..PodSecurity::default()
        };
        assert_eq!(uid(None, None).effective_run_as_non_root(), None);
        assert_eq!(
            uid(Some(1000), None).effective_run_as_non_root(),
            Some(true)
        );
        assert_eq!(uid(Some(0), None).effective_run_as_non_root(), None);
        assert_eq!(
            uid(Some(1000), Some(false)).effective_run_as_non_root(),
            Some(false)
        );
        assert_eq!(
            uid(None, Some(true)).effective_run_as_non_root(),
            Some(true)
        );
    }
}
