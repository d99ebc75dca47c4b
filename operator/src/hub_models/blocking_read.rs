//! One repository's read (the commit its revision names, then the numbers at that commit), off
//! the operator's runtime thread and under one deadline.
//!
//! Parsing `config.json`, the index and the headers is CPU work with no await in it; on the
//! operator's runtime thread (one by default) a slow parse would stop reconciles, lease renewals
//! and `/healthz`. So the whole read (its requests and its parsing) runs on a blocking thread
//! with a small runtime of its own, and the deadline covers the read as a whole, not one file.
//! A blocking thread cannot be cancelled: the caller stops waiting at the deadline (plus
//! [`GRACE`]) but keeps the read's slot until the thread is done, so abandoned reads never
//! pile up beyond the reads allowed at once.
use std::time::Duration;

use vramfit_api::conditions::Reason;
use vramfit_hub::{HubClient, HubConfig, RepoRef};
use vramfit_models::source::CheckpointError;

use super::resolver::{HubRead, reason};

/// How long past the deadline the caller still waits for a read that has not returned (its
/// own runtime checks the deadline only between steps of work).
pub const GRACE: Duration = Duration::from_secs(1);

/// A read's outcome: the commit and the numbers, or the condition's reason and one line.
pub type ReadResult = Result<HubRead, (Reason, String)>;

/// The line of a read that ran out of time.
pub fn past_deadline(repo: &RepoRef, endpoint: &str, deadline: Duration) -> (Reason, String) {
    (
        Reason::HubTimeout,
        format!(
            "{repo} ({endpoint}): no complete read within {}s (config.json, the index and every header together)",
            deadline.as_secs_f32()
        ),
    )
}

/// Reads `repo` on a blocking thread; the caller's runtime thread only waits, up to
/// `deadline` + [`GRACE`]. Returns the result and, when the caller gave up waiting, the
/// thread's handle still running (await it before freeing the read's slot).
pub async fn read(
    config: HubConfig,
    repo: RepoRef,
    deadline: Duration,
) -> (ReadResult, Option<tokio::task::JoinHandle<ReadResult>>) {
    let endpoint = config.endpoint.clone();
    let inner_repo = repo.clone();
    let mut thread =
        tokio::task::spawn_blocking(move || read_on_this_thread(config, &inner_repo, deadline));
    match tokio::time::timeout(deadline + GRACE, &mut thread).await {
        Ok(Ok(result)) => (result, None),
        Ok(Err(failed)) => (
            Err((
                Reason::HubInvalid,
                format!("{repo} ({endpoint}): the read stopped abnormally: {failed}"),
            )),
            None,
        ),
        Err(_) => (Err(past_deadline(&repo, &endpoint, deadline)), Some(thread)),
    }
}

/// The read, on the calling (blocking) thread, with a runtime of its own.
fn read_on_this_thread(config: HubConfig, repo: &RepoRef, deadline: Duration) -> ReadResult {
    let endpoint = config.endpoint.clone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            (
                Reason::HubUnavailable,
                format!("{repo} ({endpoint}): cannot start the read: {e}"),
            )
        })?;
    runtime.block_on(async {
        let client = HubClient::new(config).map_err(|e| (Reason::HubInvalid, e.to_string()))?;
        match tokio::time::timeout(deadline, read_at_commit(&client, repo)).await {
            Ok(read) => read.map_err(|e| (reason(&e), e.to_string())),
            Err(_) => Err(past_deadline(repo, &endpoint, deadline)),
        }
    })
}

/// The commit `repo`'s revision names now, then the numbers read at that very commit: a
/// branch that moves between the two requests cannot pair one commit's numbers with another.
/// Where the endpoint does not say (no model info), the numbers at the revision's name.
async fn read_at_commit(client: &HubClient, repo: &RepoRef) -> Result<HubRead, CheckpointError> {
    let commit = client
        .read_commit(repo)
        .await
        .map_err(CheckpointError::Source)?;
    let at = commit
        .as_deref()
        .and_then(|commit| RepoRef::new(repo.repo(), commit).ok())
        .unwrap_or_else(|| repo.clone());
    let checkpoint = client.read_checkpoint(&at).await?;
    Ok(HubRead { checkpoint, commit })
}
