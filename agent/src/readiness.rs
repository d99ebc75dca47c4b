//! What `/readyz` answers: ready once a probe has finished and the node is known to carry
//! the labels rendered from it (written, or found current).
use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};

use vramfit_runtime::admin_server::ReadinessSource;

/// Shared between the refresh loop (which sets it) and the HTTP server (which reads it).
#[derive(Debug, Default)]
pub struct Readiness {
    probed: AtomicBool,
    labels_current: AtomicBool,
}

impl Readiness {
    /// Not ready.
    pub fn new() -> Self {
        Self::default()
    }

    /// A probe finished.
    pub fn set_probed(&self) {
        self.probed.store(true, Ordering::Relaxed);
    }

    /// Whether the node carries the labels of the latest probe.
    pub fn set_labels_current(&self, current: bool) {
        self.labels_current.store(current, Ordering::Relaxed);
    }

    /// Ready: probed, and labels written or found current.
    pub fn is_ready(&self) -> bool {
        self.probed.load(Ordering::Relaxed) && self.labels_current.load(Ordering::Relaxed)
    }
}

impl ReadinessSource for Readiness {
    fn readiness(&self) -> Result<(), Cow<'static, str>> {
        if self.is_ready() {
            Ok(())
        } else {
            Err(Cow::Borrowed("no probe yet, or labels not written"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_needs_a_probe_and_current_labels() {
        let r = Readiness::new();
        assert!(!r.is_ready());
        r.set_labels_current(true);
        assert!(!r.is_ready());
        r.set_probed();
        assert!(r.is_ready());
        r.set_labels_current(false);
        assert!(!r.is_ready());
    }

    #[test]
    fn readyz_says_why_not() {
        let r = Readiness::new();
        assert_eq!(
            r.readiness(),
            Err(Cow::Borrowed("no probe yet, or labels not written"))
        );
        r.set_probed();
        r.set_labels_current(true);
        assert_eq!(r.readiness(), Ok(()));
    }
}
