//! What `/readyz` answers: ready once the agent has written its ModelCache's status, or knows
//! the ModelCache does not exist yet (nothing to report; the operator creates it).
use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};

use vramfit_runtime::admin_server::ReadinessSource;

/// Shared between the loop (which sets it) and the HTTP server (which reads it).
#[derive(Debug, Default)]
pub struct Readiness {
    ready: AtomicBool,
}

impl Readiness {
    /// Not ready.
    pub fn new() -> Self {
        Self::default()
    }

    /// A status was written, or the ModelCache is known absent.
    pub fn set_ready(&self) {
        self.ready.store(true, Ordering::Relaxed);
    }

    /// Whether ready.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }
}

impl ReadinessSource for Readiness {
    fn readiness(&self) -> Result<(), Cow<'static, str>> {
        if self.is_ready() {
            Ok(())
        } else {
            Err(Cow::Borrowed(
                "no status written yet, and the ModelCache not yet known absent",
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_once_set() {
        let r = Readiness::new();
        assert!(r.readiness().is_err());
        r.set_ready();
        assert_eq!(r.readiness(), Ok(()));
    }
}
