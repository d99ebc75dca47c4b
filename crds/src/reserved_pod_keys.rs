//! Pod label and annotation keys a job may not set in `spec.pod.labels`/`annotations`: the
//! keys vramfit sets on every pod itself, and the annotations that would change the pod's
//! security, which vramfit fixes (the README's Security section says why each is here).
//!
//! One table serves both checks: the CRD's CEL rules (so that `kubectl apply` fails at once)
//! and the operator's (`InvalidSpec`, for a job stored before the rules existed).
use crate::pod_keys;

/// How a reserved key is recognised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyPattern {
    /// This key exactly.
    Exact(&'static str),
    /// Every key that starts with this.
    Prefix(&'static str),
}

impl KeyPattern {
    /// Whether `key` is one of this pattern's.
    pub fn matches(self, key: &str) -> bool {
        match self {
            KeyPattern::Exact(exact) => key == exact,
            KeyPattern::Prefix(prefix) => key.starts_with(prefix),
        }
    }

    /// The same test as a CEL expression on the string variable `var`. Only `==` and
    /// `startsWith`: their cost does not grow with the length of a key, which the schema
    /// cannot bound.
    fn cel(self, var: &str) -> String {
        match self {
            KeyPattern::Exact(exact) => format!("{var} == '{exact}'"),
            KeyPattern::Prefix(prefix) => format!("{var}.startsWith('{prefix}')"),
        }
    }

    /// How the key reads in a message.
    pub fn describe(self) -> String {
        match self {
            KeyPattern::Exact(exact) => exact.to_string(),
            KeyPattern::Prefix(prefix) => format!("{prefix}*"),
        }
    }
}

/// A group of reserved keys that share a reason.
#[derive(Clone, Copy, Debug)]
pub struct ReservedKeys {
    /// The keys.
    pub patterns: &'static [KeyPattern],
    /// Why a job may not set them, completing "<key> is reserved: …".
    pub why: &'static str,
}

impl ReservedKeys {
    /// Whether `key` is one of these.
    pub fn contains(&self, key: &str) -> bool {
        self.patterns.iter().any(|p| p.matches(key))
    }

    /// A CEL expression true when the string variable `var` is one of these keys.
    pub fn cel(&self, var: &str) -> String {
        self.patterns
            .iter()
            .map(|p| p.cel(var))
            .collect::<Vec<_>>()
            .join(" || ")
    }
}

/// The labels the operator puts on every pod ([`pod_keys`]): a job's own value would be
/// overwritten, or, for a `vramfit.io/` key vramfit does not set yet, taken for vramfit's.
pub const VRAMFIT_LABELS: ReservedKeys = ReservedKeys {
    patterns: &[
        KeyPattern::Prefix(crate::labels::PREFIX),
        KeyPattern::Prefix(pod_keys::ADAPTER_LABEL_PREFIX),
        KeyPattern::Exact(pod_keys::APP_NAME_LABEL),
        KeyPattern::Exact(pod_keys::APP_INSTANCE_LABEL),
        KeyPattern::Exact(pod_keys::APP_MANAGED_BY_LABEL),
        KeyPattern::Exact(pod_keys::APP_COMPONENT_LABEL),
    ],
    why: "vramfit sets it on every pod",
};

/// The annotations the operator puts on every pod (the plan, the spec hash), and any other
/// `vramfit.io/` key.
pub const VRAMFIT_ANNOTATIONS: ReservedKeys = ReservedKeys {
    patterns: &[KeyPattern::Prefix(crate::labels::PREFIX)],
    why: "vramfit sets it on every pod",
};

/// Annotations that change what the pod's containers may do, which vramfit fixes to what Pod
/// Security `restricted` asks (seccomp `RuntimeDefault`, no capability, no escalation):
///
/// * AppArmor: from 1.30 the API server turns the annotation into the container's
///   `securityContext.appArmorProfile`, so `unconfined` would lift the node's profile;
/// * seccomp (the pre-1.19 annotations): the pod-level one makes the API server refuse the
///   pod when it contradicts vramfit's field; both ask for a profile other than vramfit's;
/// * container-runtime pass-through: CRI-O hands `io.kubernetes.cri-o.*` (host devices, user
///   namespaces, cgroup settings) and Kata Containers `io.katacontainers.*` (hypervisor and
///   guest settings) to the runtime when a runtime handler allows them, and CDI's
///   `cdi.k8s.io/` annotations (NVIDIA's `nvidia.cdi.k8s.io/`) inject devices, such as
///   GPUs the device plugin did not assign, where a runtime passes pod annotations on.
pub const SECURITY_ANNOTATIONS: ReservedKeys = ReservedKeys {
    patterns: &[
        KeyPattern::Prefix("container.apparmor.security.beta.kubernetes.io/"),
        KeyPattern::Exact("seccomp.security.alpha.kubernetes.io/pod"),
        KeyPattern::Prefix("container.seccomp.security.alpha.kubernetes.io/"),
        KeyPattern::Prefix("io.kubernetes.cri-o."),
        KeyPattern::Prefix("io.katacontainers."),
        KeyPattern::Prefix("cdi.k8s.io/"),
        KeyPattern::Prefix("nvidia.cdi.k8s.io/"),
    ],
    why: "it would change the pod's security (AppArmor, seccomp, container runtime options or devices), which vramfit fixes",
};

/// Which map of `spec.pod` a key is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodKeyField {
    /// `spec.pod.labels`.
    Labels,
    /// `spec.pod.annotations`.
    Annotations,
}

impl PodKeyField {
    /// The field's path in the job.
    pub fn path(self) -> &'static str {
        match self {
            PodKeyField::Labels => "spec.pod.labels",
            PodKeyField::Annotations => "spec.pod.annotations",
        }
    }

    /// The reserved key groups of this field.
    pub fn reserved(self) -> &'static [ReservedKeys] {
        match self {
            PodKeyField::Labels => &[VRAMFIT_LABELS],
            PodKeyField::Annotations => &[VRAMFIT_ANNOTATIONS, SECURITY_ANNOTATIONS],
        }
    }
}

/// Why `key` may not be set in `field`, if it may not.
pub fn reserved(field: PodKeyField, key: &str) -> Option<&'static str> {
    field
        .reserved()
        .iter()
        .find(|group| group.contains(key))
        .map(|group| group.why)
}

/// The first reserved key of a job's pod labels and annotations, with its field and reason.
pub fn first_reserved<'a>(
    labels: impl IntoIterator<Item = &'a String>,
    annotations: impl IntoIterator<Item = &'a String>,
) -> Option<(PodKeyField, &'a str, &'static str)> {
    let labels = labels.into_iter().map(|k| (PodKeyField::Labels, k));
    let annotations = annotations
        .into_iter()
        .map(|k| (PodKeyField::Annotations, k));
    labels
        .chain(annotations)
        .find_map(|(field, key)| reserved(field, key).map(|why| (field, key.as_str(), why)))
}

/// The `x-kubernetes-validations` of a `spec.pod` map: one rule per reserved group, whose
/// message names the first reserved key found.
pub fn cel_rules(field: PodKeyField) -> Vec<serde_json::Value> {
    field
        .reserved()
        .iter()
        .map(|group| {
            let test = group.cel("k");
            serde_json::json!({
                "rule": format!("!self.exists(k, {test})"),
                "messageExpression": format!(
                    "{} + self.filter(k, {test})[0] + {}",
                    cel_string(&format!("{} may not set ", field.path())),
                    cel_string(&format!(": {}", group.why)),
                ),
                "message": format!(
                    "{} may not set {}: {}",
                    field.path(),
                    group
                        .patterns
                        .iter()
                        .map(|p| p.describe())
                        .collect::<Vec<_>>()
                        .join(", "),
                    group.why
                ),
            })
        })
        .collect()
}

/// `text` as a CEL string literal.
fn cel_string(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vramfit_keys_and_security_annotations_are_reserved_and_others_are_not() {
        use PodKeyField::{Annotations, Labels};
        for key in [
            pod_keys::JOB_LABEL,
            pod_keys::ATTEMPT_LABEL,
            pod_keys::NODE_CLASS_LABEL,
            "vramfit.io/anything",
            "app.kubernetes.io/managed-by",
            "app.kubernetes.io/name",
        ] {
            assert!(reserved(Labels, key).is_some(), "label {key}");
        }
        for key in [
            pod_keys::PLAN_ANNOTATION,
            pod_keys::SPEC_HASH_ANNOTATION,
            "container.apparmor.security.beta.kubernetes.io/inference",
            "seccomp.security.alpha.kubernetes.io/pod",
            "container.seccomp.security.alpha.kubernetes.io/inference",
            "io.kubernetes.cri-o.Devices",
            "io.katacontainers.config.hypervisor.path",
            "cdi.k8s.io/gpus",
            "nvidia.cdi.k8s.io/gpus",
        ] {
            assert!(reserved(Annotations, key).is_some(), "annotation {key}");
        }
        for key in [
            "team",
            "app.kubernetes.io/part-of",
            "app.kubernetes.io/version",
            "example.com/vramfit.io",
        ] {
            assert_eq!(reserved(Labels, key), None, "label {key}");
            assert_eq!(reserved(Annotations, key), None, "annotation {key}");
        }
        // An AppArmor label means nothing to Kubernetes: only the annotation is reserved.
        assert_eq!(
            reserved(
                Labels,
                "container.apparmor.security.beta.kubernetes.io/inference"
            ),
            None
        );
    }

    #[test]
    fn the_first_reserved_key_is_reported_with_its_field() {
        let labels = ["team".to_string()];
        let annotations = [
            "note".to_string(),
            "container.apparmor.security.beta.kubernetes.io/inference".to_string(),
        ];
        let (field, key, why) = first_reserved(&labels, &annotations).expect("one is reserved");
        assert_eq!(field, PodKeyField::Annotations);
        assert_eq!(
            key,
            "container.apparmor.security.beta.kubernetes.io/inference"
        );
        assert!(why.contains("AppArmor"), "{why}");
        assert_eq!(first_reserved(&labels, &annotations[..1]), None);
    }

    #[test]
    fn the_cel_test_spells_every_pattern() {
        assert_eq!(VRAMFIT_ANNOTATIONS.cel("k"), "k.startsWith('vramfit.io/')");
        let security = SECURITY_ANNOTATIONS.cel("k");
        assert!(security.contains("k == 'seccomp.security.alpha.kubernetes.io/pod'"));
        assert_eq!(
            security.matches(" || ").count() + 1,
            SECURITY_ANNOTATIONS.patterns.len()
        );
    }
}
