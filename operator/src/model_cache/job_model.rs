//! The model a job would take from the node cache (pure): a batch job (one pod per attempt,
//! or a group), or a served job whose replica is one pod, with `model.huggingFace` and
//! without `cache: false`. Served replicas that are groups fetch their model in their pods.
use vramfit_api::model_cache::model_key;
use vramfit_api::{InferenceJob, Runtime};
use vramfit_hub::DEFAULT_REVISION;

/// A job's cacheable model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobModel {
    /// `owner/name`.
    pub repo: String,
    /// The revision the job names (`main` when unset).
    pub revision: String,
    /// `owner/name@revision`.
    pub key: String,
    /// llama.cpp's GGUF file in the repository, if named.
    pub file: Option<String>,
    /// The job's runtime.
    pub runtime: Runtime,
}

/// The model `job` would take from the cache, if it may use the cache at all.
pub fn job_model(job: &InferenceJob) -> Option<JobModel> {
    let spec = &job.spec;
    if spec.serve.is_some() && spec.gpus.max_nodes > 1 {
        return None;
    }
    let hf = spec.model.hugging_face.as_ref()?;
    if hf.cache == Some(false) {
        return None;
    }
    let revision = hf
        .revision
        .clone()
        .unwrap_or_else(|| DEFAULT_REVISION.to_string());
    Some(JobModel {
        key: model_key(&hf.repo, &revision),
        repo: hf.repo.clone(),
        revision,
        file: hf.file.clone(),
        runtime: spec.runtime,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use vramfit_api::checkpoint::HuggingFaceModel;

    pub(crate) fn hf_job(name: &str, repo: &str) -> InferenceJob {
        let mut spec = fixtures::vllm_mistral_spec();
        spec.serve = Some(Default::default());
        spec.model.hugging_face = Some(HuggingFaceModel {
            repo: repo.to_string(),
            ..Default::default()
        });
        fixtures::job(name, spec)
    }

    #[test]
    fn batch_jobs_groups_and_one_pod_replicas_with_the_cache_left_on_take_their_model_from_it() {
        let job = hf_job("chat", "Qwen/Qwen3-8B");
        let model = job_model(&job).unwrap();
        assert_eq!(model.key, "Qwen/Qwen3-8B@main");
        let mut off = job.clone();
        off.spec.model.hugging_face.as_mut().unwrap().cache = Some(false);
        assert_eq!(job_model(&off), None);
        let mut batch = job.clone();
        batch.spec.serve = None;
        assert_eq!(job_model(&batch), Some(model.clone()), "a batch job");
        let mut batch_group = batch.clone();
        batch_group.spec.gpus.max_nodes = 2;
        assert_eq!(job_model(&batch_group), Some(model), "a batch group");
        let mut off_batch = batch;
        off_batch.spec.model.hugging_face.as_mut().unwrap().cache = Some(false);
        assert_eq!(job_model(&off_batch), None);
        let mut served_group = job.clone();
        served_group.spec.gpus.max_nodes = 2;
        assert_eq!(
            job_model(&served_group),
            None,
            "served replicas that are groups fetch in their pods"
        );
        let mut preset = job;
        preset.spec.model.hugging_face = None;
        assert_eq!(job_model(&preset), None);
    }
}
