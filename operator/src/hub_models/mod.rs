//! `model.huggingFace`: the numbers a job leaves unset and the commit its revision names, read
//! from the Hub by the background [`resolver`] and kept in `status.resolvedModel` (so every pod
//! of the job takes one commit until the job names another revision); the one seam in a reconcile ([`prepare`] before observe, [`record`] on the
//! decided status, [`wait`] while the numbers are not there yet).
mod blocking_read;
mod read_queue;
pub mod resolver;
pub mod token_scope;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use vramfit_api::checkpoint::ResolvedModel;
use vramfit_api::conditions::{ConditionType, ConditionsUpdate, Reason};
use vramfit_api::{InferenceJob, InferenceJobStatus, Phase};
use vramfit_hub::{DEFAULT_REVISION, RepoRef};
use vramfit_models::Checkpoint;
use vramfit_planner::checkpoint::{fill_unset, model_spec};

use resolver::{Asker, HubResolver, Lookup};

/// How soon a job whose repository is being read is looked at again.
pub const READING_RETRY: Duration = Duration::from_secs(2);

/// What a reconcile does about `model.huggingFace`.
pub enum HubStep {
    /// The job names no repository: nothing to do.
    NotNamed,
    /// The job with the numbers it leaves unset filled from the repository, and what was read.
    Ready(Box<InferenceJob>, ResolvedModel),
    /// Not read (yet): the condition to show and when to look again (`None`: only when the
    /// job changes).
    Wait {
        /// The condition's reason.
        reason: Reason,
        /// One line.
        message: String,
        /// When to reconcile again.
        retry_in: Option<Duration>,
    },
}

/// The job's repository as the Hub names it.
fn repo_of(job: &InferenceJob) -> Option<Result<RepoRef, String>> {
    let hf = job.spec.model.hugging_face.as_ref()?;
    let revision = hf.revision.as_deref().unwrap_or(DEFAULT_REVISION);
    Some(RepoRef::new(&hf.repo, revision).map_err(|e| e.to_string()))
}

/// The job with its repository's numbers, or why not yet. Reads only the resolver's cache.
pub fn prepare(job: &InferenceJob, hub: &Arc<HubResolver>) -> HubStep {
    let repo = match repo_of(job) {
        None => return HubStep::NotNamed,
        Some(Ok(repo)) => repo,
        Some(Err(message)) => {
            return HubStep::Wait {
                reason: Reason::HubInvalid,
                message,
                retry_in: None,
            };
        }
    };
    // What an earlier reconcile read for this repo@revision is kept in status: a restarted
    // operator, or one whose cache let the entry go, plans from it while the Hub is away.
    if let Some(recorded) = recorded(job, &repo) {
        return ready(job, recorded);
    }
    let asker = Asker {
        namespace: job.metadata.namespace.as_deref().unwrap_or_default(),
        name: job.metadata.name.as_deref().unwrap_or_default(),
        generation: job.metadata.generation,
    };
    match hub.lookup(&asker, &repo) {
        Lookup::Ready(read) => ready(job, resolved(&repo, &read.checkpoint, read.commit.clone())),
        Lookup::Reading => HubStep::Wait {
            reason: Reason::ModelResolving,
            message: format!("reading {repo} from {}", hub.endpoint()),
            retry_in: Some(READING_RETRY),
        },
        Lookup::Failed {
            reason,
            message,
            retry_in: Some(retry_in),
        } => HubStep::Wait {
            reason,
            message: format!("{message}; retried in {}s", retry_in.as_secs().max(1)),
            retry_in: Some(retry_in),
        },
        Lookup::Failed {
            reason,
            message,
            retry_in: None,
        } => HubStep::Wait {
            reason,
            message: format!("{message}; read again when the job changes"),
            retry_in: None,
        },
    }
}

/// The job filled from what was read, unless a number read breaks a bound of the CRD: then
/// the job waits with `HubInvalid` and the field named, as `vramfit plan --model-from` refuses
/// it (the same check of `spec.model`).
fn ready(job: &InferenceJob, resolved: ResolvedModel) -> HubStep {
    let mut filled = filled_from(job, &resolved);
    // The steps after this one see the commit before the status records it: the pods built
    // now take the model at that commit ([`crate::model_cache::job_model`]).
    filled.status.get_or_insert_default().resolved_model = Some(resolved.clone());
    let violations = vramfit_api::schema_check::model_violations(&filled.spec.model);
    if violations.is_empty() {
        return HubStep::Ready(Box::new(filled), resolved);
    }
    let problems: Vec<String> = violations.iter().map(ToString::to_string).collect();
    HubStep::Wait {
        reason: Reason::HubInvalid,
        message: format!(
            "{} holds numbers the InferenceJob schema refuses: {}",
            resolved.source,
            problems.join("; ")
        ),
        retry_in: None,
    }
}

/// `status.resolvedModel`, when it was read from this repo@revision.
fn recorded(job: &InferenceJob, repo: &RepoRef) -> Option<ResolvedModel> {
    let recorded = job.status.as_ref()?.resolved_model.as_ref()?;
    (recorded.source == source(repo)).then(|| recorded.clone())
}

fn source(repo: &RepoRef) -> String {
    format!("{}@{}", repo.repo(), repo.revision())
}

/// The status record of what was read from `repo`, at `commit` where the Hub named one.
pub fn resolved(repo: &RepoRef, checkpoint: &Checkpoint, commit: Option<String>) -> ResolvedModel {
    let read = model_spec(checkpoint, None).spec;
    ResolvedModel {
        source: source(repo),
        commit,
        architecture: Some(checkpoint.architecture.value.clone()),
        parameters: read.parameters,
        active_parameters: read.active_parameters,
        layers: read.layers.unwrap_or(checkpoint.layers.value),
        hidden_size: read.hidden_size.unwrap_or(checkpoint.hidden_size.value),
        attention_heads: read
            .attention_heads
            .unwrap_or(checkpoint.attention_heads.value),
        kv_heads: read.kv_heads.unwrap_or(checkpoint.kv_heads.value),
        head_dim: read.head_dim.unwrap_or(checkpoint.head_dim.value),
        context_limit: read.context_limit,
        vocab_size: read.vocab_size,
        weight_bytes: read.weight_bytes,
        experts: read.experts,
        pre_quantized: read.pre_quantized,
        vision: read.vision,
    }
}

/// The job with the numbers it leaves unset taken from what was read (its own win, field by
/// field).
pub fn filled_from(job: &InferenceJob, resolved: &ResolvedModel) -> InferenceJob {
    let mut filled = job.clone();
    filled.spec.model = fill_unset(&job.spec.model, &resolved.model_spec());
    filled
}

/// Records what was read on a decided status: `resolvedModel` and `ModelResolved=True`.
pub fn record(
    status: &mut InferenceJobStatus,
    resolved: ResolvedModel,
    generation: Option<i64>,
    now: &Time,
) {
    let message = format!("read {}", resolved.source);
    status.resolved_model = Some(resolved);
    ConditionsUpdate::new(&mut status.conditions, generation, now).set(
        ConditionType::ModelResolved,
        true,
        Reason::ModelRead,
        message,
    );
    vramfit_api::conditions::sort(&mut status.conditions);
}

/// The status of a job that waits for its repository: Pending (unless further on), and
/// `ModelResolved=False` with the reason.
pub fn wait(job: &InferenceJob, reason: Reason, message: String, now: &Time) -> InferenceJobStatus {
    let mut status = job.status.clone().unwrap_or_default();
    status.phase.get_or_insert(Phase::Pending);
    ConditionsUpdate::new(&mut status.conditions, job.metadata.generation, now).set(
        ConditionType::ModelResolved,
        false,
        reason,
        message,
    );
    vramfit_api::conditions::sort(&mut status.conditions);
    status
}

#[cfg(test)]
mod tests;
