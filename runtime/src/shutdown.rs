//! Graceful shutdown: SIGTERM (the kubelet stopping the pod) or SIGINT (Ctrl-C) stops a
//! long-running binary. [`signal`] is the bare future; [`Shutdown`] fans one stop out to
//! every task that needs it.
use std::fmt;

use tokio::sync::watch;
use tracing::{info, warn};

/// The signal that asked the process to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM: the kubelet stopping the pod.
    Terminate,
    /// SIGINT: Ctrl-C.
    Interrupt,
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Signal::Terminate => "SIGTERM",
            Signal::Interrupt => "SIGINT",
        })
    }
}

/// Completes on the first SIGTERM or SIGINT and says which. A signal that cannot be listened
/// for is logged and never fires; the other one still does.
pub async fn signal() -> Signal {
    let terminate = async {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            match signal(SignalKind::terminate()) {
                Ok(mut term) => {
                    term.recv().await;
                }
                Err(error) => {
                    warn!(%error, "cannot listen for SIGTERM; only SIGINT stops the process");
                    std::future::pending::<()>().await;
                }
            }
        }
        #[cfg(not(unix))]
        std::future::pending::<()>().await;
    };
    let interrupt = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            warn!(%error, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        () = terminate => Signal::Terminate,
        () = interrupt => Signal::Interrupt,
    }
}

/// Fires once, on the first signal; clones all see it.
#[derive(Clone, Debug)]
pub struct Shutdown {
    receiver: watch::Receiver<bool>,
}

/// Triggers a [`Shutdown`] by hand (tests, or a fatal error elsewhere).
#[derive(Debug)]
pub struct ShutdownTrigger {
    sender: watch::Sender<bool>,
}

impl ShutdownTrigger {
    /// Tells every [`Shutdown`] to stop.
    pub fn trigger(&self) {
        self.sender.send_replace(true);
    }
}

impl Shutdown {
    /// A shutdown and the trigger that fires it.
    pub fn new() -> (ShutdownTrigger, Shutdown) {
        let (sender, receiver) = watch::channel(false);
        (ShutdownTrigger { sender }, Shutdown { receiver })
    }

    /// Whether shutdown was asked for.
    pub fn is_triggered(&self) -> bool {
        *self.receiver.borrow()
    }

    /// Completes when shutdown is asked for (or every trigger is gone).
    pub async fn wait(&mut self) {
        // An error means the trigger was dropped: nobody can ask any more, so stop too.
        let _ = self.receiver.wait_for(|stop| *stop).await;
    }
}

/// Fires `trigger` on SIGTERM or SIGINT (see [`signal`]).
pub async fn trigger_on_signals(trigger: ShutdownTrigger) {
    let signal = signal().await;
    info!("{signal} received, shutting down");
    trigger.trigger();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_clone_sees_the_trigger() {
        let (trigger, mut shutdown) = Shutdown::new();
        let mut other = shutdown.clone();
        assert!(!shutdown.is_triggered());
        trigger.trigger();
        shutdown.wait().await;
        other.wait().await;
        assert!(other.is_triggered());
    }

    #[tokio::test]
    async fn a_dropped_trigger_stops_the_waiters() {
        let (trigger, mut shutdown) = Shutdown::new();
        drop(trigger);
        shutdown.wait().await;
        assert!(!shutdown.is_triggered(), "stopped, but nobody asked");
    }

    #[test]
    fn signals_are_named_as_in_the_logs() {
        assert_eq!(Signal::Terminate.to_string(), "SIGTERM");
        assert_eq!(Signal::Interrupt.to_string(), "SIGINT");
    }
}
