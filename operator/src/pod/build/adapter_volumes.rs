//! Where a served pod finds its LoRA adapters (`serve.adapters`): each adapter's volume (the
//! fine-tuning job's output volume, copied into the job's pod volumes when the adapter was
//! accepted) mounted read-only at `/vramfit/adapters/<name>`, and the keys an endpoint picker
//! reads: the `vramfit.io/adapters` annotation (the names in llama.cpp's id order) and a
//! label `adapter.vramfit.io/<name>: "true"` per adapter.
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::VolumeMount;
use vramfit_api::adapters::{ResolvedAdapter, adapter_mount_path, adapter_volume_name};
use vramfit_api::pod_keys::{ADAPTER_LABEL_PREFIX, ADAPTERS_ANNOTATION};
use vramfit_planner::JobInput;

fn adapters(input: &JobInput) -> &[ResolvedAdapter] {
    input.serve.as_ref().map_or(&[], |s| s.adapters.as_slice())
}

/// The read-only mounts of a served pod's adapters; none without.
pub fn adapter_mounts(input: &JobInput) -> Vec<VolumeMount> {
    adapters(input)
        .iter()
        .map(|a| VolumeMount {
            name: adapter_volume_name(&a.name),
            mount_path: adapter_mount_path(&a.name),
            read_only: Some(true),
            ..VolumeMount::default()
        })
        .collect()
}

/// The labels (one per adapter) and the annotation (the names in order) of a served pod's
/// adapters; none without.
pub fn adapter_keys(input: &JobInput) -> (BTreeMap<String, String>, Option<(String, String)>) {
    let list = adapters(input);
    let labels = list
        .iter()
        .map(|a| {
            (
                format!("{ADAPTER_LABEL_PREFIX}{}", a.name),
                "true".to_string(),
            )
        })
        .collect();
    let names: Vec<&str> = list.iter().map(|a| a.name.as_str()).collect();
    let annotation =
        (!names.is_empty()).then(|| (ADAPTERS_ANNOTATION.to_string(), names.join(",")));
    (labels, annotation)
}

/// The adapters a pod serves, from its `vramfit.io/adapters` annotation.
pub fn served_adapters(annotations: Option<&BTreeMap<String, String>>) -> Vec<String> {
    annotations
        .and_then(|a| a.get(ADAPTERS_ANNOTATION))
        .map(|names| {
            names
                .split(',')
                .filter(|n| !n.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}
