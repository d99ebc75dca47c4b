//! The autoscaler's step of a served job's reconcile (`serve.autoscaling`,
//! docs/autoscaling.md), run by [`crate::dispatch`] before the served or served-group
//! pipeline, so that both scale the same way:
//!
//! | step | module | touches the API |
//! |---|---|---|
//! | observe: the replicas, their planned concurrency and last readings | [`crate::observe::replica_load`] | no (caches) |
//! | register the Ready replicas for the load reader's next pass | [`crate::scaling_state`] | no |
//! | until the reader's first pass over them, keep the last status | [`crate::autoscaling::Report::kept`] | no |
//! | decide: bounds, windows, rates, a person's change, an HPA | [`crate::autoscaling`] | no (pure) |
//! | write `spec.serve.replicas` through the scale subresource | [`crate::writes::scale`] | yes |
//!
//! The readings come from [`crate::load_reader`], the leader's task that reads each
//! registered replica's metrics and then reconciles its job.
use std::time::Instant;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::{Resource, ResourceExt};
use tracing::info;
use vramfit_api::conditions::ConditionType;
use vramfit_api::event_reasons::EventReason;
use vramfit_api::{InferenceJob, ServeSpec};

use crate::autoscaling::{self, Inputs, Outcome, Report};
use crate::context::Context;
use crate::error::Error;
use crate::events::JobEvent;
use crate::metrics::autoscaler::JobFigures;
use crate::observe::replica_load;
use crate::scaling_state::ReadTargets;

/// What the step leaves the pipeline.
#[derive(Debug)]
pub enum Step {
    /// The job does not autoscale.
    Off,
    /// The report to write with the status.
    Report(Report),
    /// The replicas were written: the job's next version (its watch event) carries on.
    Scaled,
}

/// Runs one pass of `job`'s autoscaler.
pub async fn step(job: &InferenceJob, serve: &ServeSpec, ctx: &Context) -> Result<Step, Error> {
    let key = format!("{}/{}", job.namespace().unwrap_or_default(), job.name_any());
    let Some(spec) = &serve.autoscaling else {
        if ctx.scaling.is_registered(&key) {
            ctx.scaling.forget(&key, job.metadata.uid.as_deref());
            ctx.metrics.autoscaler().forget_job(&key);
        }
        return Ok(Step::Off);
    };
    let now = Instant::now();
    let period = ctx.settings.autoscale_period;
    let next_capacity = next_replica_capacity(job);
    let observed = replica_load::observe(job, ctx, next_capacity, now, period * 3);
    ctx.scaling.register(
        key.clone(),
        ReadTargets {
            runtime: job.spec.runtime,
            metric: spec.metric.clone(),
            port: serve.port,
            pods: observed.ready.clone(),
        },
    );
    // No Ready replica read by this process yet (a new leader, or the job's first Ready
    // replicas): the last pass's status stands until the load reader's first pass, rather
    // than turning to MetricsUnavailable and back, two status writes per job at every
    // restart.
    let unread = |uid: &String| !ctx.scaling.has_reading(uid);
    if !observed.ready.is_empty()
        && observed.ready.iter().map(|(uid, _)| uid).all(unread)
        && let Some(kept) = job.status.as_ref().and_then(Report::kept)
    {
        return Ok(Step::Report(kept));
    }
    let namespace = job.namespace().unwrap_or_default();
    let external = ctx.scaling.external(&namespace, &job.name_any());
    let previous = job.status.as_ref().and_then(|s| s.autoscaling.as_ref());
    let decision =
        ctx.scaling
            .with_history(job.metadata.uid.as_deref().unwrap_or(&key), |history| {
                autoscaling::decide(
                    &Inputs {
                        spec,
                        replicas: &observed.replicas,
                        current: serve.replicas,
                        last_scaled: previous.map(|p| p.desired_replicas),
                        next_capacity,
                        external: external.as_deref(),
                        now,
                    },
                    history,
                )
            });
    let report = Report::of(&decision, previous, &Time(Timestamp::now()));
    let metrics = ctx.metrics.autoscaler();
    metrics.count_decision(decision.outcome.reason().as_str());
    metrics.observe_job(
        &key,
        JobFigures {
            replicas: serve.replicas,
            desired: report.status.desired_replicas,
            utilization_percent: report.status.utilization_percent,
        },
    );
    if let Some(replicas) = decision.write {
        crate::writes::scale::set_replicas(job, replicas, ctx).await?;
        info!(job = %key, from = serve.replicas, to = replicas, "{}", decision.message);
        let event = JobEvent::normal(EventReason::Autoscaled, decision.message.clone());
        ctx.recorder.publish(&job.object_ref(&()), &[event]).await;
        return Ok(Step::Scaled);
    }
    if stands_aside(decision.outcome) && reason_changed(job, decision.outcome) {
        let event = JobEvent::normal(EventReason::AutoscalerStandsAside, decision.message.clone());
        ctx.recorder.publish(&job.object_ref(&()), &[event]).await;
    }
    Ok(Step::Report(report))
}

/// The concurrency of the replica the job would add next: the job's current plan's (its
/// best class with room when it was placed), else its batch.
fn next_replica_capacity(job: &InferenceJob) -> u32 {
    job.status
        .as_ref()
        .and_then(|s| s.plan.as_ref())
        .and_then(|plan| plan.concurrency)
        .unwrap_or(job.spec.batch_size)
        .max(1)
}

fn stands_aside(outcome: Outcome) -> bool {
    matches!(outcome, Outcome::ExternalAutoscaler | Outcome::ScaledToZero)
}

fn reason_changed(job: &InferenceJob, outcome: Outcome) -> bool {
    let reason = outcome.reason();
    !job.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == ConditionType::Autoscaling.as_str() && c.reason == reason.as_str())
    })
}
