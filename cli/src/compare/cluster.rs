//! The comparison's jobs on the cluster: which exist, creating the missing ones with
//! server-side apply, deleting them by label.
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use vramfit_api::InferenceJob;

use super::jobs::{COMPARISON_LABEL, PlannedJob};
use crate::error::CliError;

/// The field manager of every apply.
pub const FIELD_MANAGER: &str = "vramfit-compare";

fn kube_err(what: &str) -> impl Fn(kube::Error) -> CliError + '_ {
    move |e| CliError::Kube(format!("{what}: {e}"))
}

/// The jobs labelled with comparison `id`, by name.
pub async fn existing(api: &Api<InferenceJob>, id: &str) -> Result<Vec<InferenceJob>, CliError> {
    let params = ListParams::default().labels(&format!("{COMPARISON_LABEL}={id}"));
    let list = api
        .list(&params)
        .await
        .map_err(kube_err("listing the comparison's InferenceJobs"))?;
    Ok(list.items)
}

/// What starting a comparison did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Started {
    /// Jobs created now.
    pub created: Vec<String>,
    /// Jobs that already existed, left as they are (re-attached).
    pub reattached: Vec<String>,
    /// Jobs of the comparison that this invocation does not expect (other classes or repeats).
    pub strays: Vec<String>,
}

/// Creates the planned jobs that do not exist yet; existing ones are never changed, so that
/// a second invocation re-attaches to a running comparison instead of restarting it.
pub async fn start(
    api: &Api<InferenceJob>,
    id: &str,
    planned: &[PlannedJob],
) -> Result<Started, CliError> {
    let present: Vec<String> = existing(api, id)
        .await?
        .into_iter()
        .filter_map(|j| j.metadata.name)
        .collect();
    let mut started = Started::default();
    for job in planned {
        let name = job.name();
        if present.contains(&name) {
            started.reattached.push(name);
            continue;
        }
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(&job.job),
        )
        .await
        .map_err(|e| CliError::Kube(format!("creating InferenceJob {name}: {e}")))?;
        started.created.push(name);
    }
    started.strays = present
        .into_iter()
        .filter(|n| !planned.iter().any(|p| &p.name() == n))
        .collect();
    Ok(started)
}

/// Deletes every job labelled with comparison `id`; their names.
pub async fn delete(api: &Api<InferenceJob>, id: &str) -> Result<Vec<String>, CliError> {
    let mut deleted = Vec::new();
    for job in existing(api, id).await? {
        let Some(name) = job.metadata.name else {
            continue;
        };
        match api.delete(&name, &DeleteParams::background()).await {
            Ok(_) => deleted.push(name),
            // Gone in between: what --delete wanted.
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(CliError::Kube(format!("deleting InferenceJob {name}: {e}"))),
        }
    }
    Ok(deleted)
}
