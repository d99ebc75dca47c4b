//! Graceful shutdown: SIGTERM (the kubelet stopping the pod) or SIGINT (Ctrl-C) ends the
//! refresh loop and the HTTP server.
use tokio::sync::watch;
use tracing::{info, warn};

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

/// Fires `trigger` on SIGTERM or SIGINT.
pub async fn trigger_on_signals(trigger: ShutdownTrigger) {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                warn!(%error, "cannot listen for SIGTERM; only SIGINT stops the agent");
                std::future::pending::<()>().await;
            }
        }
    };
    let interrupt = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            warn!(%error, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        () = terminate => info!("SIGTERM received, shutting down"),
        () = interrupt => info!("SIGINT received, shutting down"),
    }
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
}
