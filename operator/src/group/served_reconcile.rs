//! The reconcile of a served job whose replicas are groups (`spec.serve` with
//! `gpus.maxNodes` above 1): the serving pipeline's steps ([`crate::served::reconcile_served`])
//! on the groups seen as one pod each ([`super::served`]), with the groups' headless Services
//! and NetworkPolicies (the members', and the leader's that opens the serving port) written
//! before their pods and deleted after the status once their pods are gone; with
//! `--model-cache`, the model's volume and claim that every member mounts created just
//! before the pods.
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use tracing::warn;
use vramfit_api::checkpoint::ResolvedModel;
use vramfit_api::pod_keys::GROUP_LABEL;
use vramfit_api::{InferenceJob, ServeSpec};

use super::apply::write_checked;
use super::served::{
    ServedGroupDecision, ServedGroupObserved, into_groups, leader_record, owned_as_groups,
    running_members_of_ended_groups, seen_as_one_pod,
};
use crate::context::Context;
use crate::error::Error;
use crate::error::GroupApplyError;
use crate::observe::served as observe;
use crate::replicas::decide::ServedDecision;
use crate::replicas::service::controlled_by;
use crate::writes::served as apply;
use crate::writes::status as update_status;

/// The reconcile of a served job whose replicas are groups: the steps in order.
pub async fn reconcile_served_group(
    job: &InferenceJob,
    serve: &ServeSpec,
    ctx: &Context,
    resolved: Option<ResolvedModel>,
    scaling: Option<crate::autoscaling::Report>,
) -> Result<Action, Error> {
    let (decision, namespace) = {
        // Room is read and the chosen pods reserved under one lock, with no await between.
        let _placing = ctx.reservations.hold_placement();
        // Caches, no writes.
        let snapshot = observe::served_snapshot(job, serve, ctx)?;
        let namespace = snapshot.base.namespace().to_string();
        let job_name = job.name_any();
        let pods = |name: &str| snapshot.base.pod(name);
        let deleting = |name: &str| ctx.serving.deleting.contains(&namespace, name);
        let leader = |group: &str| leader_record(job, group);
        let as_one_pod = |name: &str| seen_as_one_pod(&job_name, name, &leader, &pods, &deleting);
        let groups = owned_as_groups(&job_name, snapshot.owned());
        // Pure: the serving decision on the groups as one pod each, then in the groups' terms.
        // The running members of ended groups go whatever is decided: their GPUs are free for
        // the replicas' next groups.
        let leaving =
            running_members_of_ended_groups(&job_name, snapshot.owned(), &leader, &pods, &deleting);
        let served = snapshot.decide_as(Time(Timestamp::now()), &as_one_pod, &groups, &leaving)?;
        let services = group_objects::<Service>(ctx, &namespace, job);
        let policies = group_objects::<NetworkPolicy>(ctx, &namespace, job);
        let service = |name: &str| ctx.serving.service(&namespace, name);
        let network_policy = |name: &str| ctx.serving.network_policy(&namespace, name);
        let observed = ServedGroupObserved {
            job,
            serve,
            input: snapshot.base.input().as_ref().ok(),
            pods: &pods,
            deleting: &deleting,
            owned: snapshot.owned(),
            service: &service,
            network_policy: &network_policy,
            owned_services: &services,
            owned_network_policies: &policies,
            inventory: snapshot.base.inventory(),
            spread: ctx.settings.group_spread,
            leader: &leader,
        };
        let decision = into_groups(&observed, served)?;
        // In memory: finished pods release their GPUs; new pods count against their class.
        for pod in snapshot.base.settled_pods() {
            ctx.reservations.forget(&namespace, &pod);
        }
        apply::reserve(job, &namespace, &decision.served, ctx);
        (decision, namespace)
    };
    // Woken when GPUs free up, or when a node's cache changes while a replica waits for its
    // model (within a second of the model's `Ready`, not at its next look).
    apply::mark_waiting(job, &namespace, &decision.served, ctx);
    write_pods_and_groups(job, &decision, ctx).await?;
    let action =
        apply::write_objects_and_status(job, decision.served.clone(), resolved, scaling, ctx)
            .await?;
    // API: the objects of groups whose pods are gone.
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
    for write in &decision.delete_services {
        write_checked(&services, write, job, "Service").await?;
    }
    let policies: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), &namespace);
    for write in &decision.delete_network_policies {
        write_checked(&policies, write, job, "NetworkPolicy").await?;
    }
    Ok(action)
}

/// API: ended groups' pods deleted first (their GPUs free), then each group's Service and
/// NetworkPolicy, then the model volume and claim the new members mount (`--model-cache`),
/// then the new pods and metadata changes: no member runs before its group's names resolve
/// and its policy guards it.
async fn write_pods_and_groups(
    job: &InferenceJob,
    decision: &ServedGroupDecision,
    ctx: &Context,
) -> Result<(), Error> {
    let only = |deletes: bool| ServedDecision {
        delete_pods: if deletes {
            decision.served.delete_pods.clone()
        } else {
            Vec::new()
        },
        create_pods: if deletes {
            Vec::new()
        } else {
            decision.served.create_pods.clone()
        },
        apply_pods: if deletes {
            Vec::new()
        } else {
            decision.served.apply_pods.clone()
        },
        // The model volumes come with the pods that mount them, after the groups' objects.
        volumes: if deletes {
            Vec::new()
        } else {
            decision.served.volumes.clone()
        },
        ..decision.served.clone()
    };
    let forget_created = || {
        let namespace = job.namespace().unwrap_or_default();
        for (pod, _) in &decision.served.create_pods {
            ctx.reservations.forget(&namespace, &pod.name_any());
        }
    };
    if let Err(error) = apply::write_pods(job, &only(true), ctx).await {
        forget_created();
        update_status::report_pod_not_written(job, ctx, &error).await;
        return Err(error.into());
    }
    let namespace = job.namespace().unwrap_or_default();
    let services: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
    let policies: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), &namespace);
    for objects in &decision.objects {
        let written = async {
            write_checked(&services, &objects.service, job, "Service").await?;
            // The leader's first: a group whose members' policy opened the serving port on
            // every member (before the leader had a policy of its own) keeps it open on
            // the leader while the members' is narrowed.
            write_checked(
                &policies,
                &objects.leader_network_policy,
                job,
                "NetworkPolicy",
            )
            .await?;
            write_checked(&policies, &objects.network_policy, job, "NetworkPolicy").await
        };
        if let Err(error) = written.await {
            forget_created();
            if let GroupApplyError::NameTaken { kind, name } = &error {
                super::report_name_taken(job, ctx, kind, name).await;
            }
            warn!(group = %objects.group, %error, "the group's objects were not written");
            return Err(error.into());
        }
    }
    if let Err(error) = apply::write_pods(job, &only(false), ctx).await {
        update_status::report_pod_not_written(job, ctx, &error).await;
        return Err(error.into());
    }
    Ok(())
}

/// The job's group objects of `K` in `namespace` the stores show (name, uid).
fn group_objects<K>(ctx: &Context, namespace: &str, job: &InferenceJob) -> Vec<(String, String)>
where
    K: GroupObjectKind,
{
    K::state(ctx)
        .iter()
        .filter(|o| {
            o.namespace().as_deref() == Some(namespace)
                && o.labels().contains_key(GROUP_LABEL)
                && controlled_by(o.owner_references(), job)
        })
        .map(|o| (o.name_any(), o.uid().unwrap_or_default()))
        .collect()
}

/// The stores of a group's objects.
trait GroupObjectKind: ResourceExt + Sized {
    fn state(ctx: &Context) -> Vec<std::sync::Arc<Self>>;
}

impl GroupObjectKind for Service {
    fn state(ctx: &Context) -> Vec<std::sync::Arc<Self>> {
        ctx.serving.stores.services.state()
    }
}

impl GroupObjectKind for NetworkPolicy {
    fn state(ctx: &Context) -> Vec<std::sync::Arc<Self>> {
        ctx.serving.stores.network_policies.state()
    }
}
