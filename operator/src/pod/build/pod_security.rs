//! The security context of a workload pod (pure): what Pod Security `restricted` asks of
//! every pod, plus the identity the job chose (`spec.pod.securityContext`).
//!
//! Only fields a Kubernetes 1.30 API server knows are set (no `appArmorProfile`,
//! `supplementalGroupsPolicy` or `seLinuxChangePolicy`): a server-side apply of a field the
//! server lacks is refused.
use k8s_openapi::api::core::v1::{
    Capabilities, PodSecurityContext, SeccompProfile, SecurityContext,
};
use vramfit_api::PodTemplate;

/// The pod's security context: seccomp `RuntimeDefault` and the job's identity settings.
pub fn pod_security_context(template: &PodTemplate) -> PodSecurityContext {
    let identity = template.security_context.clone().unwrap_or_default();
    PodSecurityContext {
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_string(),
            localhost_profile: None,
        }),
        run_as_non_root: identity.effective_run_as_non_root(),
        run_as_user: identity.run_as_user,
        run_as_group: identity.run_as_group,
        fs_group: identity.fs_group,
        ..PodSecurityContext::default()
    }
}

/// The workload container's security context: no privilege escalation, no capabilities (an
/// inference server needs none; GPUs come through the device plugin, not capabilities).
pub fn container_security_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            add: None,
            drop: Some(vec!["ALL".to_string()]),
        }),
        ..SecurityContext::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use k8s_openapi::api::core::v1::Pod;
    use vramfit_api::{Fallback, InferenceJob, PodSecurity};
    use vramfit_planner::{plan_for_class, resolve_job};

    /// The checks of Pod Security `restricted` (Kubernetes 1.30) that a vramfit pod's fields
    /// can fail, by the name Pod Security Admission gives them.
    fn restricted_violations(pod: &Pod) -> Vec<&'static str> {
        let spec = pod.spec.as_ref().expect("a spec");
        let pod_ctx = spec.security_context.clone().unwrap_or_default();
        let mut out = Vec::new();
        if spec.host_network == Some(true)
            || spec.host_pid == Some(true)
            || spec.host_ipc == Some(true)
        {
            out.push("host namespaces");
        }
        let allowed_volume = |v: &k8s_openapi::api::core::v1::Volume| {
            v.host_path.is_none() && v.gce_persistent_disk.is_none() && v.nfs.is_none()
        };
        if !spec.volumes.iter().flatten().all(allowed_volume) {
            out.push("restricted volume types");
        }
        let seccomp_ok = |p: &Option<SeccompProfile>| {
            p.as_ref()
                .is_some_and(|p| p.type_ == "RuntimeDefault" || p.type_ == "Localhost")
        };
        let mut non_root = true;
        let mut seccomp = true;
        for c in &spec.containers {
            let ctx = c.security_context.clone().unwrap_or_default();
            if ctx.privileged == Some(true) {
                out.push("privileged");
            }
            if ctx.allow_privilege_escalation != Some(false) {
                out.push("allowPrivilegeEscalation != false");
            }
            let caps = ctx.capabilities.clone().unwrap_or_default();
            let drops_all = caps.drop.iter().flatten().any(|d| d == "ALL");
            let adds_only_bind = caps.add.iter().flatten().all(|a| a == "NET_BIND_SERVICE");
            if !drops_all || !adds_only_bind {
                out.push("unrestricted capabilities");
            }
            let container_non_root = ctx.run_as_non_root.or(pod_ctx.run_as_non_root);
            non_root &= container_non_root == Some(true);
            if ctx.run_as_user.or(pod_ctx.run_as_user) == Some(0) {
                out.push("runAsUser=0");
            }
            seccomp &= seccomp_ok(&ctx.seccomp_profile) || seccomp_ok(&pod_ctx.seccomp_profile);
        }
        if !non_root {
            out.push("runAsNonRoot != true");
        }
        if !seccomp {
            out.push("seccompProfile");
        }
        out
    }

    fn pod_of(job: &InferenceJob) -> Pod {
        let class = fixtures::class("a10g", 4);
        let input = resolve_job(&job.spec).expect("a valid job");
        let plan = plan_for_class(&input, &class, &Fallback::default()).expect("a plan");
        crate::pod::build::desired_pod(job, &input, &plan, &class, 1).expect("a pod")
    }

    fn with_identity(mut job: InferenceJob, identity: PodSecurity) -> InferenceJob {
        job.spec.pod.get_or_insert_default().security_context = Some(identity);
        job
    }

    #[test]
    fn a_job_that_runs_as_non_root_passes_pod_security_restricted() {
        let plain = fixtures::job("chat", fixtures::vllm_mistral_spec());
        assert_eq!(
            restricted_violations(&pod_of(&plain)),
            ["runAsNonRoot != true"],
            "by default only the user is left to the job (most GPU images run as root)"
        );
        let uid = PodSecurity {
            run_as_user: Some(1000),
            ..PodSecurity::default()
        };
        let uid_job = with_identity(plain.clone(), uid.clone());
        assert_eq!(restricted_violations(&pod_of(&uid_job)), Vec::<&str>::new());
        let non_root = PodSecurity {
            run_as_non_root: Some(true),
            ..PodSecurity::default()
        };
        let non_root_job = with_identity(plain.clone(), non_root);
        assert_eq!(
            restricted_violations(&pod_of(&non_root_job)),
            Vec::<&str>::new()
        );
        let root = PodSecurity {
            run_as_user: Some(0),
            ..PodSecurity::default()
        };
        let root_job = with_identity(plain.clone(), root);
        assert_eq!(
            restricted_violations(&pod_of(&root_job)),
            ["runAsUser=0", "runAsNonRoot != true"]
        );
        let templated = fixtures::job_with_pod_template("chat", fixtures::vllm_mistral_spec());
        let templated = with_identity(templated, uid);
        assert_eq!(
            restricted_violations(&pod_of(&templated)),
            Vec::<&str>::new()
        );
    }

    #[test]
    fn defaults_leave_the_user_to_the_image() {
        let pod = pod_security_context(&PodTemplate::default());
        assert_eq!(
            pod.seccomp_profile.as_ref().map(|p| p.type_.as_str()),
            Some("RuntimeDefault")
        );
        assert_eq!(pod.run_as_non_root, None);
        assert_eq!(pod.run_as_user, None);
        assert_eq!(pod.fs_group, None);
        let container = container_security_context();
        assert_eq!(container.allow_privilege_escalation, Some(false));
        assert_eq!(
            container.capabilities.and_then(|c| c.drop),
            Some(vec!["ALL".to_string()])
        );
        assert_eq!(container.privileged, None);
    }

    #[test]
    fn the_jobs_identity_is_passed_through() {
        let template = PodTemplate {
            security_context: Some(PodSecurity {
                run_as_user: Some(1000),
                run_as_group: Some(2000),
                run_as_non_root: None,
                fs_group: Some(3000),
            }),
            ..PodTemplate::default()
        };
        let pod = pod_security_context(&template);
        assert_eq!(pod.run_as_user, Some(1000));
        assert_eq!(pod.run_as_group, Some(2000));
        assert_eq!(pod.fs_group, Some(3000));
        assert_eq!(pod.run_as_non_root, Some(true), "implied by a non-zero UID");
    }

    #[test]
    fn only_fields_a_1_30_server_knows_are_written() {
        // Exactly these keys: a field a 1.30 server lacks would make the pod's apply fail.
        let template = PodTemplate {
            security_context: Some(PodSecurity {
                run_as_user: Some(1000),
                run_as_group: Some(1000),
                run_as_non_root: Some(true),
                fs_group: Some(1000),
            }),
            ..PodTemplate::default()
        };
        let sorted_keys = |value: serde_json::Value| -> Vec<String> {
            let mut keys: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
            keys.sort_unstable();
            keys
        };
        assert_eq!(
            sorted_keys(serde_json::to_value(pod_security_context(&template)).unwrap()),
            [
                "fsGroup",
                "runAsGroup",
                "runAsNonRoot",
                "runAsUser",
                "seccompProfile"
            ]
        );
        assert_eq!(
            sorted_keys(serde_json::to_value(container_security_context()).unwrap()),
            ["allowPrivilegeEscalation", "capabilities"]
        );
    }
}
