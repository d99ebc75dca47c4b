//! Timing shared by the group and served-job phases: each job's write stamped as it is made,
//! and the time from that stamp until the job reaches a state the phase waits for.
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use kube::Client;

use super::{create_all, job_name};

/// Runs `write(i, client)` for every job as `create_all` does, and returns when each job's
/// write returned, by job name.
pub async fn stamp_all<F, Fut>(
    clients: &[Client],
    count: usize,
    write: F,
) -> Result<HashMap<String, Instant>>
where
    F: Fn(usize, Client) -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let stamps: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let write = &write;
    create_all(clients, count, |i, client| {
        let stamps = stamps.clone();
        async move {
            write(i, client).await?;
            stamps
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(job_name(i), Instant::now());
            Ok(())
        }
    })
    .await?;
    let stamps = stamps.lock().unwrap_or_else(|e| e.into_inner());
    Ok(stamps.clone())
}

/// `done[job] − start[job]` for every job in both, sorted.
pub fn latencies(
    done: &HashMap<String, Instant>,
    start: &HashMap<String, Instant>,
) -> Vec<Duration> {
    let mut out: Vec<Duration> = start
        .iter()
        .filter_map(|(job, at)| Some(done.get(job)?.saturating_duration_since(*at)))
        .collect();
    out.sort();
    out
}

/// The last of `done`, from `started`.
pub fn last(done: &HashMap<String, Instant>, started: Instant) -> Duration {
    done.values()
        .map(|at| at.saturating_duration_since(started))
        .max()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_pair_jobs_by_name_and_sort() {
        let t0 = Instant::now();
        let start = HashMap::from([
            ("a".to_string(), t0),
            ("b".to_string(), t0),
            ("c".to_string(), t0),
        ]);
        let done = HashMap::from([
            ("a".to_string(), t0 + Duration::from_secs(3)),
            ("b".to_string(), t0 + Duration::from_secs(1)),
        ]);
        assert_eq!(
            latencies(&done, &start),
            vec![Duration::from_secs(1), Duration::from_secs(3)]
        );
        assert_eq!(last(&done, t0), Duration::from_secs(3));
    }
}
