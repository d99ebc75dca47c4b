//! Where a fine-tuning pod finds its data and writes its output: the volumes the job names in
//! `spec.tuning` (volumes of `spec.pod.volumes`, admitted like any other) mounted at fixed
//! paths the training env points to (`VRAMFIT_DATA_DIR`, `VRAMFIT_OUTPUT_DIR`).
use k8s_openapi::api::core::v1::VolumeMount;
use vramfit_api::tuning::{DATA_MOUNT_PATH, OUTPUT_MOUNT_PATH};
use vramfit_planner::JobInput;

/// The mounts of a tuning job's data (read-only) and output volumes; none for inference.
pub fn tuning_mounts(input: &JobInput) -> Vec<VolumeMount> {
    let Some(tuning) = &input.tuning else {
        return Vec::new();
    };
    let mount = |name: &String, path: &str, read_only: bool| VolumeMount {
        name: name.clone(),
        mount_path: path.to_string(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    };
    tuning
        .data_volume
        .iter()
        .map(|v| mount(v, DATA_MOUNT_PATH, true))
        .chain(
            tuning
                .output_volume
                .iter()
                .map(|v| mount(v, OUTPUT_MOUNT_PATH, false)),
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramfit_planner::resolve_job;

    #[test]
    fn data_is_mounted_read_only_and_output_writable_at_the_paths_the_env_names() {
        let spec = serde_yaml::from_str(
            "
model: {preset: mistral-7b-instruct-v0.3}
runtime: transformers
image: x
pod: {volumes: [{name: train, persistentVolumeClaim: {claimName: t}}, {name: out, emptyDir: {}}]}
tuning: {dataVolume: train, outputVolume: out}
",
        )
        .unwrap();
        let mounts = tuning_mounts(&resolve_job(&spec).unwrap());
        assert_eq!(mounts.len(), 2);
        assert_eq!(
            (
                mounts[0].name.as_str(),
                mounts[0].mount_path.as_str(),
                mounts[0].read_only
            ),
            ("train", "/vramfit/data", Some(true))
        );
        assert_eq!(
            (
                mounts[1].name.as_str(),
                mounts[1].mount_path.as_str(),
                mounts[1].read_only
            ),
            ("out", "/vramfit/output", None)
        );
        let inference = serde_yaml::from_str(
            "model: {preset: mistral-7b-instruct-v0.3}\nruntime: transformers\nimage: x",
        )
        .unwrap();
        assert!(tuning_mounts(&resolve_job(&inference).unwrap()).is_empty());
    }
}
