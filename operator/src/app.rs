//! The operator process: metrics server, wait for the CRDs, leader election, controller,
//! graceful shutdown on SIGTERM/SIGINT (the server and the signals from `vramfit-runtime`).
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use kube::runtime::wait::Condition;
use kube::runtime::wait::conditions::is_crd_established;
use kube::{Client, CustomResourceExt};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinError, JoinHandle};
use tracing::{info, warn};
use vramfit_api::{GpuNodeClass, InferenceJob};
use vramfit_runtime::admin_server::{self, AdminRoutes};
use vramfit_runtime::shutdown;

use crate::cli::Args;
use crate::controller::{self, ControllerConfig};
use crate::dispatch::panic_message;
use crate::error::StartupError;
use crate::health::Health;
use crate::leader::{self, LeaseConfig};
use crate::metrics::Metrics;

/// Runs the operator until SIGTERM/SIGINT (`Ok`) or a fatal error (a lost lease included).
pub async fn run(args: Args) -> Result<(), StartupError> {
    let (stop_tx, stop) = watch::channel(false);
    tokio::spawn(async move {
        shutdown::signal().await;
        info!("shutdown requested; finishing in-flight reconciles");
        let _ = stop_tx.send(true);
    });

    #[cfg(feature = "fault-injection")]
    crate::fault_injection::arm_from_env();
    let metrics = Arc::new(Metrics::new());
    let health = Arc::new(Health::new(args.leader_election));
    // The server outlives the controller: it stops once everything else has (a lost lease
    // included, which no signal announces).
    let (server_stop_tx, mut server_stop) = watch::channel(false);
    let listener = TcpListener::bind(args.metrics_addr)
        .await
        .map_err(|source| StartupError::Http {
            addr: args.metrics_addr.to_string(),
            source,
        })?;
    let gauges = health.clone();
    let router = AdminRoutes::new(health.clone(), metrics.clone())
        .before_scrape(move || gauges.refresh_gauges())
        .router();
    let mut server = tokio::spawn(async move {
        let stopped = async move {
            let _ = server_stop.wait_for(|stopped| *stopped).await;
        };
        admin_server::serve(listener, router, stopped).await
    });
    info!(addr = %args.metrics_addr, "serving /metrics, /healthz and /readyz");

    let leading = async {
        match Client::try_default().await {
            Ok(client) => lead(client, &args, metrics, health, stop, controller::run).await,
            Err(source) => Err(StartupError::Kube {
                context: "connecting to the API server",
                source,
            }),
        }
    };
    let (result, server_ended) = unless_the_server_ends(leading, &mut server).await;
    let _ = server_stop_tx.send(true);
    if !server_ended {
        let _ = server.await;
    }
    result
}

/// Runs `leading` while the admin server runs: a server that ends first (its socket failed,
/// its task panicked) ends the process with an error too, as the kubelet's probes would see
/// no `/healthz` and no `/readyz` while the operator went on. Returns whether the server ended.
async fn unless_the_server_ends(
    leading: impl Future<Output = Result<(), StartupError>>,
    server: &mut JoinHandle<std::io::Result<()>>,
) -> (Result<(), StartupError>, bool) {
    tokio::select! {
        result = leading => (result, false),
        served = server => {
            let why = match served {
                Ok(Ok(())) => "it stopped".to_string(),
                Ok(Err(error)) => error.to_string(),
                Err(error) => error.to_string(),
            };
            (Err(StartupError::AdminServerEnded(why)), true)
        }
    }
}

/// Waits for the CRDs, then runs the controller (`run_controller`) — under `--leader-election`
/// only while holding the Lease — until `stop` (`Ok`), a lost lease, or the controller's own
/// end (`Err`): the controller runs in a task whose end is always watched, so a controller that
/// panicked or whose streams ended takes the process down (non-zero) instead of leaving it
/// ready, and leading, with nothing reconciled.
/// Which jobs read the Hub with the token (the flags were checked when parsed; anything
/// unexpected leaves every read anonymous).
fn hub_token_scope(args: &Args) -> crate::hub_models::token_scope::TokenScope {
    let namespaces = args
        .hub_token_namespaces
        .listed()
        .unwrap_or_default()
        .to_vec();
    crate::hub_models::token_scope::TokenScope::new(namespaces, args.hub_token_repos.clone())
        .unwrap_or_else(|error| {
            warn!(%error, "every Hub read is anonymous");
            crate::hub_models::token_scope::TokenScope::default()
        })
}

pub async fn lead<C, Run>(
    client: Client,
    args: &Args,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    mut stop: watch::Receiver<bool>,
    run_controller: C,
) -> Result<(), StartupError>
where
    C: FnOnce(Client, Arc<Metrics>, Arc<Health>, ControllerConfig, watch::Receiver<bool>) -> Run
        + Send,
    Run: Future<Output = Result<(), StartupError>> + Send + 'static,
{
    if !wait_for_crds(&client, &mut stop).await {
        return Ok(());
    }
    info!(namespaces = %args.watch_namespaces, "watching InferenceJobs and their pods");
    let mut config = ControllerConfig {
        concurrency: args.concurrency,
        instance: Some(leader::identity()),
        namespaces: args.watch_namespaces.clone(),
        ..ControllerConfig::default()
    };
    config.settings.hub = crate::hub_models::resolver::HubSettings {
        token_secret: args.hub_token_secret.clone(),
        token_scope: hub_token_scope(args),
        namespace: args.lease_namespace.clone(),
        timeout: std::time::Duration::from_secs(args.hub_timeout_seconds.into()),
        read_deadline: std::time::Duration::from_secs(args.hub_read_deadline_seconds.into()),
        ..crate::hub_models::resolver::HubSettings::new(args.hub_endpoint.clone())
    };
    config.settings.group_spread = args.group_spread;
    config.settings.model_cache = args.model_cache_settings();
    config.settings.autoscale_period =
        std::time::Duration::from_secs(args.autoscale_period_seconds.into());
    if !args.leader_election {
        let controller = tokio::spawn(run_controller(
            client,
            metrics,
            health.clone(),
            config,
            stop.clone(),
        ));
        let ended = controller_end(controller.await, *stop.borrow());
        health.set_synced(false);
        return ended;
    }

    let lease = LeaseConfig {
        name: args.lease_name.clone(),
        namespace: Some(args.lease_namespace.trim())
            .filter(|ns| !ns.is_empty())
            .unwrap_or("default")
            .to_string(),
        identity: leader::identity(),
    };
    let Some(mut leadership) = leader::acquire(client.clone(), &lease, &mut stop).await? else {
        return Ok(());
    };
    health.set_leader(true);
    // The controller stops on a signal or when the lease is lost.
    let (controller_stop_tx, controller_stop) = watch::channel(false);
    let mut controller = tokio::spawn(run_controller(
        client,
        metrics,
        health.clone(),
        config,
        controller_stop,
    ));
    let ending = tokio::select! {
        _ = leadership.lost() => Ending::LeaseLost,
        _ = stop.wait_for(|stopped| *stopped) => Ending::Stopped,
        joined = &mut controller => Ending::ControllerEnded(controller_end(joined, false)),
    };
    health.set_leader(false);
    match ending {
        Ending::LeaseLost => {
            // Another replica may already lead: stop writing now rather than letting in-flight
            // reconciles finish (they resume from the cluster's state on the new leader).
            controller.abort();
            Err(StartupError::Lease(format!(
                "lost the lease {}/{}; exiting so that this replica restarts as a standby",
                lease.namespace, lease.name
            )))
        }
        Ending::Stopped => {
            let _ = controller_stop_tx.send(true);
            if let Err(error) = controller_end(controller.await, true) {
                warn!(%error, "controller task failed");
            }
            leadership.release().await;
            Ok(())
        }
        Ending::ControllerEnded(ended) => {
            // Nothing reconciles here any more: hand the lease over at once, then exit.
            leadership.release().await;
            ended
        }
    }
}

/// Why leading ended.
enum Ending {
    LeaseLost,
    Stopped,
    ControllerEnded(Result<(), StartupError>),
}

/// What the end of the controller task means: `Ok` only for a clean stop that was asked for.
fn controller_end(
    joined: Result<Result<(), StartupError>, JoinError>,
    stop_requested: bool,
) -> Result<(), StartupError> {
    match joined {
        Ok(Ok(())) if stop_requested => Ok(()),
        Ok(Ok(())) => Err(StartupError::ControllerEnded(
            "the controller stopped without being asked to".into(),
        )),
        Ok(Err(error)) => Err(error),
        Err(error) if error.is_panic() => Err(StartupError::ControllerEnded(format!(
            "the controller panicked: {}",
            panic_message(error.into_panic().as_ref())
        ))),
        Err(error) => Err(StartupError::ControllerEnded(format!(
            "the controller task failed: {error}"
        ))),
    }
}

/// Waits until both CRDs are established, logging what is missing; `false` if stopped first.
async fn wait_for_crds(client: &Client, stop: &mut watch::Receiver<bool>) -> bool {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let names = [InferenceJob::crd_name(), GpuNodeClass::crd_name()];
    let mut delay = Duration::from_secs(2);
    loop {
        let mut missing = Vec::new();
        for name in names {
            match crds.get_opt(name).await {
                Ok(crd) if is_crd_established().matches_object(crd.as_ref()) => {}
                Ok(Some(_)) => missing.push(format!("{name} (not established yet)")),
                Ok(None) => missing.push(format!("{name} (not installed)")),
                Err(error) => missing.push(format!("{name} ({error})")),
            }
        }
        if missing.is_empty() {
            info!("CRDs established");
            return true;
        }
        warn!(
            missing = %missing.join(", "),
            retry_in = ?delay,
            "waiting for the vramfit CRDs; install them with the Helm chart or the generated YAML (crds/)"
        );
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stop.wait_for(|stopped| *stopped) => return false,
        }
        delay = (delay * 2).min(Duration::from_secs(30));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The admin server's task ending (here: failing) while the operator runs ends the run
    /// with an error; the run ending first leaves the server to be stopped.
    #[tokio::test]
    async fn the_run_ends_when_the_admin_server_ends() {
        let mut failing = tokio::spawn(async {
            Err(std::io::Error::other("accept failed: too many open files"))
        });
        let forever = std::future::pending::<Result<(), StartupError>>();
        let (result, ended) = unless_the_server_ends(forever, &mut failing).await;
        assert!(ended);
        assert!(
            matches!(&result, Err(StartupError::AdminServerEnded(why)) if why.contains("too many open files")),
            "{result:?}"
        );

        let mut serving = tokio::spawn(std::future::pending::<std::io::Result<()>>());
        let (result, ended) = unless_the_server_ends(async { Ok(()) }, &mut serving).await;
        assert!(result.is_ok() && !ended);
        serving.abort();
    }
}
