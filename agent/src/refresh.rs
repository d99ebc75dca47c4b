//! The refresh loop: probe → render → sync, every interval, with backoff after failures.
//!
//! Only the sync touches the API, and only when the rendered labels differ from what the
//! node carries; a node whose GPUs do not change costs the API server nothing. Every
//! repair interval, a refresh is a repair instead: it reads the node again (one GET) and
//! puts back labels someone else changed, removed or added.
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, info, warn};
use vramfit_runtime::shutdown::Shutdown;

use crate::backoff::Backoff;
use crate::gpu::{GpuProbe, GpuState, Probe, ProbeError};
use crate::labels::{NodeLabels, render};
use crate::metrics::Metrics;
use crate::node_writer::{NodeWriter, SyncOutcome, WriteError};
use crate::readiness::Readiness;

/// Why one refresh did not leave the node's labels current.
#[derive(Debug, thiserror::Error)]
pub enum RefreshError {
    /// No reading (the fixture could not be read).
    #[error(transparent)]
    Probe(#[from] ProbeError),
    /// The API call failed.
    #[error(transparent)]
    Write(#[from] WriteError),
}

/// Runs the (blocking) GPU probe off the async threads and turns readings into labels,
/// recording metrics and readiness on the way.
pub struct Prober {
    probe: Arc<Mutex<Box<dyn GpuProbe>>>,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    last_rendered: Option<NodeLabels>,
}

impl Prober {
    /// Wraps a backend.
    pub fn new(probe: Box<dyn GpuProbe>, metrics: Arc<Metrics>, readiness: Arc<Readiness>) -> Self {
        Self {
            probe: Arc::new(Mutex::new(probe)),
            metrics,
            readiness,
            last_rendered: None,
        }
    }

    /// Probes now and renders the labels.
    pub async fn labels(&mut self) -> Result<NodeLabels, ProbeError> {
        let probe = Arc::clone(&self.probe);
        let reading = tokio::task::spawn_blocking(move || {
            // A probe that panicked earlier poisoned the lock; its state is still usable.
            probe.lock().unwrap_or_else(PoisonError::into_inner).probe()
        })
        .await
        .map_err(|e| ProbeError::Task(e.to_string()));
        let reading = match reading.and_then(|r| r) {
            Ok(reading) => reading,
            Err(error) => {
                self.metrics.count_probe_error(error.reason());
                warn!(%error, "GPU probe failed; labels left as they are");
                return Err(error);
            }
        };
        self.metrics.observe_probe(&reading);
        let labels = render(&reading);
        self.log_reading(&reading, &labels);
        self.readiness.set_probed();
        self.last_rendered = Some(labels.clone());
        Ok(labels)
    }

    fn log_reading(&self, reading: &Probe, labels: &NodeLabels) {
        let changed = self.last_rendered.as_ref() != Some(labels);
        match (&reading.state, changed) {
            (GpuState::Absent { reason, detail }, true) => {
                warn!(reason = reason.as_str(), %detail, "no usable GPU; labelling the node gpu.present=false");
            }
            (GpuState::Absent { reason, detail }, false) => {
                debug!(reason = reason.as_str(), %detail, "still no usable GPU");
            }
            (GpuState::Present(gpus), true) => {
                let products: Vec<&str> = gpus.iter().map(|g| g.name.as_str()).collect();
                info!(count = gpus.len(), ?products, "GPUs found");
            }
            (GpuState::Present(gpus), false) => debug!(count = gpus.len(), "GPUs unchanged"),
        }
    }
}

/// The long-running agent: a prober and a writer for one node.
pub struct RefreshLoop {
    /// Reads the GPUs.
    pub prober: Prober,
    /// Writes the labels.
    pub writer: NodeWriter,
    /// Time between refreshes when all is well.
    pub interval: Duration,
    /// Time between repairs: refreshes that read the node again instead of trusting what
    /// the writer last wrote (rounded up to a whole number of refreshes).
    pub repair_interval: Duration,
    /// Time between retries after a failure.
    pub backoff: Backoff,
    /// Shared with `/metrics`.
    pub metrics: Arc<Metrics>,
    /// Shared with `/readyz`.
    pub readiness: Arc<Readiness>,
}

impl RefreshLoop {
    /// One probe and, if the labels differ from the node's, one write.
    pub async fn refresh(&mut self) -> Result<SyncOutcome, RefreshError> {
        self.refresh_or_repair(false).await
    }

    /// One probe, one GET of the node, and one write only if its `vramfit.io/` labels differ
    /// from the rendered ones (someone else changed them, or the GPUs changed).
    pub async fn repair(&mut self) -> Result<SyncOutcome, RefreshError> {
        self.refresh_or_repair(true).await
    }

    async fn refresh_or_repair(&mut self, repair: bool) -> Result<SyncOutcome, RefreshError> {
        let labels = self.prober.labels().await?;
        let result = if repair {
            self.writer.repair(&labels).await
        } else {
            self.writer.sync(&labels).await
        };
        match result {
            Ok(outcome) => {
                match outcome {
                    SyncOutcome::AlreadyCurrent => {}
                    SyncOutcome::Written => self.metrics.count_label_write(),
                    SyncOutcome::Repaired => {
                        self.metrics.count_label_write();
                        self.metrics.count_label_repair();
                    }
                }
                self.readiness.set_labels_current(true);
                Ok(outcome)
            }
            Err(error) => {
                self.metrics.count_label_write_error();
                self.readiness.set_labels_current(false);
                Err(error.into())
            }
        }
    }

    /// Refreshes every interval until `shutdown`; failures are logged and retried with
    /// backoff, never fatal.
    pub async fn run(mut self, mut shutdown: Shutdown) {
        info!(
            node = %self.writer.node_name(),
            interval_s = self.interval.as_secs(),
            repair_interval_s = self.repair_interval.as_secs(),
            "refresh loop started"
        );
        // The first refresh reads the node anyway.
        let mut next_repair = Instant::now() + self.repair_interval;
        loop {
            // A repair that fails is tried again by the retries until one succeeds.
            let repair = Instant::now() >= next_repair;
            let delay = tokio::select! {
                result = self.refresh_or_repair(repair) => match result {
                    Ok(_) => {
                        if repair {
                            next_repair = Instant::now() + self.repair_interval;
                        }
                        self.backoff.reset();
                        self.interval
                    }
                    Err(error) => {
                        let delay = self.backoff.next_delay();
                        warn!(%error, retry_in_ms = delay.as_millis() as u64, "refresh failed, will retry");
                        delay
                    }
                },
                () = shutdown.wait() => break,
            };
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = shutdown.wait() => break,
            }
        }
        info!("refresh loop stopped");
    }
}

/// `--once`: probe once, then try to write up to `attempts` times with backoff.
pub async fn write_once(
    prober: &mut Prober,
    writer: &mut NodeWriter,
    attempts: u32,
    mut backoff: Backoff,
) -> Result<SyncOutcome, RefreshError> {
    let labels = prober.labels().await?;
    let mut attempt = 1;
    loop {
        match writer.sync(&labels).await {
            Ok(outcome) => return Ok(outcome),
            Err(error) if attempt < attempts => {
                let delay = backoff.next_delay();
                warn!(%error, attempt, retry_in_ms = delay.as_millis() as u64, "label write failed, will retry");
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
            Err(error) => return Err(error.into()),
        }
    }
}
