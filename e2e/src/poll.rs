//! Polling with timeouts: waiting until something holds, and checking that it keeps holding.
use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, anyhow};

/// Polls `probe` until it succeeds or `timeout` passes. `probe` returns `Err` describing
/// what it saw; the timeout error names `what` was awaited and the last thing seen.
pub async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let start = Instant::now();
    let mut interval = Duration::from_millis(200);
    loop {
        match probe().await {
            Ok(value) => return Ok(value),
            Err(seen) => {
                if start.elapsed() >= timeout {
                    return Err(anyhow!(
                        "timed out after {:?} waiting for {what}; last seen: {seen:#}",
                        timeout
                    ));
                }
            }
        }
        tokio::time::sleep(interval).await;
        interval = (interval * 2).min(Duration::from_secs(2));
    }
}

/// Polls `probe` for `duration` and fails as soon as it fails once: for "nothing more
/// happens" checks (no duplicate pod shows up).
pub async fn consistently<F, Fut>(what: &str, duration: Duration, mut probe: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<()>>,
{
    let start = Instant::now();
    while start.elapsed() < duration {
        probe().await.with_context(|| {
            format!(
                "expected {what} to hold for {duration:?}, it stopped after {:?}",
                start.elapsed()
            )
        })?;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn eventually_retries_then_names_what_it_saw() {
        let mut n = 0;
        let v = eventually("n to reach 3", Duration::from_secs(5), || {
            n += 1;
            let seen = n;
            async move {
                if seen >= 3 {
                    Ok(seen)
                } else {
                    Err(anyhow!("n = {seen}"))
                }
            }
        })
        .await
        .unwrap();
        assert_eq!(v, 3);
        let err = eventually("never", Duration::from_millis(300), || async {
            Err::<(), _>(anyhow!("still no"))
        })
        .await
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("waiting for never") && err.contains("still no"),
            "{err}"
        );
    }
    #[tokio::test]
    async fn consistently_fails_on_the_first_failure() {
        assert!(
            consistently("ok", Duration::from_millis(100), || async { Ok(()) })
                .await
                .is_ok()
        );
        let err = consistently("one pod", Duration::from_secs(5), || async {
            Err(anyhow!("two pods"))
        })
        .await
        .unwrap_err();
        assert!(format!("{err:#}").contains("two pods"));
    }
}
