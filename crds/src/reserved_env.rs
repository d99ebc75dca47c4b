//! The env names a job's `pod.env` may not set: the ones vramfit plans, and the ones that
//! choose which GPUs a container sees. One table, from which both the operator's check
//! ([`reserved_env`], an `InvalidSpec`) and the CRD's own validation rule ([`cel_rules`], so
//! that `kubectl apply` refuses such a job at once) are made.

/// Every env name a plan may set besides the `VRAMFIT_` ones (all of which are vramfit's).
pub const PLANNED_ENV: [&str; 8] = [
    "TORCH_DTYPE",
    "USE_QUANTIZATION",
    "QUANTIZATION_BITS",
    "USE_FLASH_ATTN",
    "MAX_TILES",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
];

/// llama.cpp's env spellings of the flags vramfit plans (`common/arg.cpp` `set_env`).
pub const LLAMACPP_FLAG_ENV: [&str; 6] = [
    "LLAMA_ARG_N_GPU_LAYERS",
    "LLAMA_ARG_CTX_SIZE",
    "LLAMA_ARG_N_PARALLEL",
    "LLAMA_ARG_CACHE_TYPE_K",
    "LLAMA_ARG_CACHE_TYPE_V",
    "LLAMA_ARG_FLASH_ATTN",
];

/// One group of reserved names and why a job may not set them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReservedGroup {
    /// Names starting with one of these.
    pub prefixes: &'static [&'static str],
    /// These names exactly.
    pub names: &'static [&'static str],
    /// Why, after "pod.env may not set NAME: ".
    pub why: &'static str,
}

/// The reserved names, by reason.
pub const RESERVED_ENV: [ReservedGroup; 3] = [
    ReservedGroup {
        prefixes: &["VRAMFIT_"],
        names: &PLANNED_ENV,
        why: "vramfit plans it from the node class",
    },
    ReservedGroup {
        prefixes: &[],
        names: &LLAMACPP_FLAG_ENV,
        why: "it sets a llama.cpp flag that vramfit plans",
    },
    ReservedGroup {
        prefixes: &["NVIDIA_"],
        names: &["CUDA_VISIBLE_DEVICES"],
        why: "it selects GPUs, which only the device plugin assigns",
    },
];

impl ReservedGroup {
    /// Whether `name` is one of the group's.
    pub fn contains(&self, name: &str) -> bool {
        self.prefixes.iter().any(|p| name.starts_with(p)) || self.names.contains(&name)
    }

    /// The group as a CEL condition on an env item `e`.
    fn cel_condition(&self) -> String {
        let prefixes = self
            .prefixes
            .iter()
            .map(|p| format!("e.name.startsWith('{p}')"));
        let names = (!self.names.is_empty()).then(|| {
            let quoted: Vec<String> = self.names.iter().map(|n| format!("'{n}'")).collect();
            format!("e.name in [{}]", quoted.join(", "))
        });
        let any: Vec<String> = prefixes.chain(names).collect();
        format!("has(e.name) && ({})", any.join(" || "))
    }

    /// The group's names for a message: `VRAMFIT_*, TORCH_DTYPE, …`.
    fn listed(&self) -> String {
        let prefixes = self.prefixes.iter().map(|p| format!("{p}*"));
        let names = self.names.iter().map(|n| n.to_string());
        prefixes.chain(names).collect::<Vec<_>>().join(", ")
    }
}

/// Why a job may not set env `name` itself, if it may not: vramfit plans it, or it chooses
/// which GPUs the container sees (the device plugin sets those for the GPUs the pod got;
/// another value would reach GPUs the pod was not given).
pub fn reserved_env(name: &str) -> Option<&'static str> {
    RESERVED_ENV
        .iter()
        .find(|group| group.contains(name))
        .map(|group| group.why)
}

/// A CEL rule of the CRD on the `pod.env` list and its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvRule {
    /// True when no item of the list is in the group.
    pub rule: String,
    /// The refusal: the group's names and why. A static message, not a `messageExpression`
    /// naming the offending variables: the API server estimates the cost of filtering and
    /// joining 128 names at over a hundred times its budget and refuses the CRD.
    pub message: String,
}

/// One rule per group: the API server refuses a job that sets a reserved name, with the same
/// reason the operator gives.
pub fn cel_rules() -> Vec<EnvRule> {
    RESERVED_ENV
        .iter()
        .map(|group| EnvRule {
            rule: format!("!self.exists(e, {})", group.cel_condition()),
            message: format!("pod.env may not set {}: {}", group.listed(), group.why),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planned_gpu_selecting_and_llamacpp_names_are_reserved_others_are_not() {
        for name in [
            "VRAMFIT_X",
            "TORCH_DTYPE",
            "MAX_TILES",
            "NVIDIA_VISIBLE_DEVICES",
        ] {
            assert!(reserved_env(name).is_some(), "{name}");
        }
        assert_eq!(
            reserved_env("CUDA_VISIBLE_DEVICES"),
            Some("it selects GPUs, which only the device plugin assigns")
        );
        assert_eq!(
            reserved_env("LLAMA_ARG_CTX_SIZE"),
            Some("it sets a llama.cpp flag that vramfit plans")
        );
        for name in [
            "HF_HOME",
            "NVIDIA",
            "cuda_visible_devices",
            "XVRAMFIT_A",
            "",
        ] {
            assert_eq!(reserved_env(name), None, "{name}");
        }
    }
}
