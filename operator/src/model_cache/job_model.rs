//! The model a job would take from the node cache (pure): a batch job (one pod per attempt,
//! or a group) or a served job (a replica of one pod, or a group of pods), with
//! `model.huggingFace` and without `cache: false`.
//!
//! The model is cached by commit: the one `status.resolvedModel.commit` recorded for the
//! repo@revision the job names (a reconcile sees it as soon as the Hub was read, before the
//! status is written), so that every replica, rank and attempt of a job mounts the same files
//! while a branch moves on. A job whose revision changed since then takes nothing from the
//! cache until the new one is read (it waits for the Hub, as its reconcile does).
use vramfit_api::model_cache::model_key;
use vramfit_api::{InferenceJob, Runtime};
use vramfit_hub::{DEFAULT_REVISION, is_commit};

/// A job's cacheable model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobModel {
    /// `owner/name`.
    pub repo: String,
    /// The commit the job's revision named when it was read; the revision it names (`main`
    /// when unset) where the Hub said no commit, or the numbers were recorded without one.
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
    let hf = spec.model.hugging_face.as_ref()?;
    if hf.cache == Some(false) {
        return None;
    }
    let named = hf.revision.as_deref().unwrap_or(DEFAULT_REVISION);
    let revision = pinned_revision(job, &hf.repo, named)?;
    Some(JobModel {
        key: model_key(&hf.repo, &revision),
        repo: hf.repo.clone(),
        revision,
        file: hf.file.clone(),
        runtime: spec.runtime,
    })
}

/// The revision the job's pods take `repo` at: the commit recorded for `repo@named`; `named`
/// itself when it is a full commit hash, when nothing is recorded yet (no pod is built before
/// the Hub is read), or when the record has no commit. `None` while the status records
/// another repo@revision than the job names (read again before anything is cached).
fn pinned_revision(job: &InferenceJob, repo: &str, named: &str) -> Option<String> {
    if is_commit(named) {
        return Some(named.to_ascii_lowercase());
    }
    let Some(recorded) = job.status.as_ref().and_then(|s| s.resolved_model.as_ref()) else {
        return Some(named.to_string());
    };
    if recorded.source != format!("{repo}@{named}") {
        return None;
    }
    Some(recorded.commit.clone().unwrap_or_else(|| named.to_string()))
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
    fn batch_jobs_groups_and_replicas_with_the_cache_left_on_take_their_model_from_it() {
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
        assert_eq!(
            job_model(&batch_group),
            Some(model.clone()),
            "a batch group"
        );
        let mut off_batch = batch;
        off_batch.spec.model.hugging_face.as_mut().unwrap().cache = Some(false);
        assert_eq!(job_model(&off_batch), None);
        let mut served_group = job.clone();
        served_group.spec.gpus.max_nodes = 2;
        assert_eq!(
            job_model(&served_group),
            Some(model.clone()),
            "served replicas that are groups, as batch groups"
        );
        let mut off_group = served_group;
        off_group.spec.model.hugging_face.as_mut().unwrap().cache = Some(false);
        assert_eq!(job_model(&off_group), None);
        let mut preset = job;
        preset.spec.model.hugging_face = None;
        assert_eq!(job_model(&preset), None);
    }

    const SHA: &str = "9c925d64d72725edaf899c6cb9c377fd0709d9c5";

    /// `job` with what the Hub said of `source` recorded, at `commit`.
    fn read(mut job: InferenceJob, source: &str, commit: Option<&str>) -> InferenceJob {
        job.status = Some(vramfit_api::InferenceJobStatus {
            resolved_model: Some(vramfit_api::checkpoint::ResolvedModel {
                source: source.into(),
                commit: commit.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        });
        job
    }

    #[test]
    fn a_branch_is_cached_at_the_commit_recorded_for_it() {
        let job = read(
            hf_job("chat", "Qwen/Qwen3-8B"),
            "Qwen/Qwen3-8B@main",
            Some(SHA),
        );
        let model = job_model(&job).unwrap();
        assert_eq!(model.revision, SHA);
        assert_eq!(model.key, format!("Qwen/Qwen3-8B@{SHA}"));
        let mut batch_group = job.clone();
        batch_group.spec.serve = None;
        batch_group.spec.gpus.max_nodes = 2;
        assert_eq!(
            job_model(&batch_group).unwrap().key,
            model.key,
            "every rank and attempt alike"
        );
        let without = read(hf_job("chat", "Qwen/Qwen3-8B"), "Qwen/Qwen3-8B@main", None);
        assert_eq!(
            job_model(&without).unwrap().key,
            "Qwen/Qwen3-8B@main",
            "no commit said: the branch's name"
        );
        let mut moved = job.clone();
        moved.spec.model.hugging_face.as_mut().unwrap().revision = Some("v2".into());
        assert_eq!(
            job_model(&moved),
            None,
            "another revision named: nothing cached until it is read"
        );
        let mut pinned = moved;
        pinned.spec.model.hugging_face.as_mut().unwrap().revision = Some(SHA.to_uppercase());
        assert_eq!(
            job_model(&pinned).unwrap().key,
            model.key,
            "a commit named is its own"
        );
    }
}
