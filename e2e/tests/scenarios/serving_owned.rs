//! A served job's Service and PodDisruptionBudget on the real API server: objects of the job's
//! name made by someone else — as kubectl or Helm make them, without any vramfit label — are
//! left untouched and reported, the API server's own `default/kubernetes` Service included; and
//! the budget lets a node drain evict a Ready replica while another replica waits for room,
//! while it still takes two Ready replicas one at a time. The eviction is the one
//! `kubectl drain` asks for (policy/v1 `pods/eviction`), judged by the API server against the
//! budget's status, which kube-controller-manager's disruption controller computes.
use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow, ensure};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use vramfit_api::event_reasons::EventReason;
use vramfit_e2e::{SETTLE, Suite, conditions_of, eventually, expect_eq, served_job};

const H100: &str = "h100-80gb-hbm3-x8";

/// What must not change on an object vramfit does not own.
#[derive(Clone, Debug, PartialEq)]
struct Untouched {
    /// A Service's resourceVersion (nothing writes a ClusterIP Service's status); a budget's
    /// generation (the disruption controller writes its status, which moves its
    /// resourceVersion).
    version: Option<String>,
    labels: BTreeMap<String, String>,
    owners: usize,
    spec: serde_json::Value,
    /// The field managers that wrote it (but its status).
    managers: Vec<String>,
}

fn managers<K: kube::Resource>(object: &K) -> Vec<String> {
    object
        .meta()
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.subresource.as_deref() != Some("status"))
        .filter_map(|m| m.manager.clone())
        .collect()
}

fn untouched_service(service: &Service) -> Untouched {
    let spec = service.spec.clone().unwrap_or_default();
    Untouched {
        version: service.resource_version(),
        labels: service.labels().clone(),
        owners: service.owner_references().len(),
        spec: json!({ "type": spec.type_, "selector": spec.selector, "ports": spec.ports }),
        managers: managers(service),
    }
}

fn untouched_pdb(pdb: &PodDisruptionBudget) -> Untouched {
    Untouched {
        version: pdb.metadata.generation.map(|g| g.to_string()),
        labels: pdb.labels().clone(),
        owners: pdb.owner_references().len(),
        spec: serde_json::to_value(&pdb.spec).unwrap_or_default(),
        managers: managers(pdb),
    }
}

/// Waits until job `name` in `namespace` is `Degraded` with `reason`.
async fn wait_degraded(s: &Suite, namespace: &str, name: &str, reason: &str) -> Result<()> {
    eventually(
        &format!("job {namespace}/{name} Degraded={reason}"),
        SETTLE,
        || async {
            let job = s.jobs_in(namespace).get(name).await?;
            let hit = job.status.as_ref().is_some_and(|st| {
                st.conditions
                    .iter()
                    .any(|c| c.type_ == "Degraded" && c.status == "True" && c.reason == reason)
            });
            ensure!(hit, "conditions {:?}", conditions_of(&job));
            Ok(())
        },
    )
    .await
}

/// A Service and a PodDisruptionBudget made as `kubectl create` makes them (no vramfit label,
/// no owner), each with a served job's name: the jobs say `Degraded`
/// (`ServiceNameTaken`, `PodDisruptionBudgetNameTaken`) and neither object changes — not its
/// selector, type, labels or owners, not even its resourceVersion. Deleting the foreign Service
/// lets its job create its own. A job named `kubernetes` in `default` leaves the API server's
/// own Service alone.
pub async fn foreign_objects_are_left_alone(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let services: Api<Service> = Api::namespaced(s.client.clone(), &s.ns);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(s.client.clone(), &s.ns);
    let create = PostParams::default();

    // A Service of another application, with the name the job will have.
    let svc_job = "e2e-foreign-svc";
    let foreign: Service = serde_json::from_value(json!({
        "metadata": { "name": svc_job, "labels": { "app": "billing" } },
        "spec": { "type": "ClusterIP", "selector": { "app": "billing" },
                  "ports": [{ "name": "https", "port": 443, "targetPort": 8443, "protocol": "TCP" }] },
    }))?;
    let foreign = services
        .create(&create, &foreign)
        .await
        .context("creating the foreign Service")?;
    let before = untouched_service(&foreign);
    let mut job = served_job(s, svc_job, 1, &[H100]);
    job["spec"]["serve"]["serviceType"] = json!("NodePort");
    s.apply_job(job).await?;
    wait_degraded(s, &s.ns, svc_job, "ServiceNameTaken").await?;
    s.wait_events(svc_job, &[EventReason::Degraded]).await?;
    s.wait_replicas(svc_job, 1).await?;
    expect_eq(
        "the foreign Service",
        untouched_service(&services.get(svc_job).await?),
        before.clone(),
    )?;
    println!("     Service {svc_job}: Degraded ServiceNameTaken, the Service unchanged");

    // A budget of another application, with the name of a job of two replicas.
    let pdb_job = "e2e-foreign-pdb";
    let foreign: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": { "name": pdb_job, "labels": { "app": "billing" } },
        "spec": { "minAvailable": 1, "selector": { "matchLabels": { "app": "billing" } } },
    }))?;
    let foreign = pdbs
        .create(&create, &foreign)
        .await
        .context("creating the foreign PodDisruptionBudget")?;
    let before_pdb = untouched_pdb(&foreign);
    s.apply_job(served_job(s, pdb_job, 2, &[H100])).await?;
    wait_degraded(s, &s.ns, pdb_job, "PodDisruptionBudgetNameTaken").await?;
    s.wait_replicas(pdb_job, 2).await?;
    // Read again after the job has been reconciled a few times (the pods' changes).
    tokio::time::sleep(Duration::from_secs(3)).await;
    expect_eq(
        "the foreign PodDisruptionBudget",
        untouched_pdb(&pdbs.get(pdb_job).await?),
        before_pdb,
    )?;
    let own = services
        .get(pdb_job)
        .await
        .context("the job's own Service")?;
    ensure!(
        own.owner_references()
            .iter()
            .any(|o| o.controller == Some(true)),
        "the job's Service is not the job's: {:?}",
        own.owner_references()
    );
    expect_eq(
        "the foreign Service, still",
        untouched_service(&services.get(svc_job).await?),
        before,
    )?;
    println!("     PDB {pdb_job}: Degraded PodDisruptionBudgetNameTaken, the budget unchanged");

    // The foreign Service goes: the job creates its own and is no longer Degraded.
    services.delete(svc_job, &DeleteParams::default()).await?;
    let uid = s.job(svc_job).await?.uid().unwrap_or_default();
    eventually(
        "the job to create its own Service once the name is free",
        Duration::from_secs(180),
        || async {
            let service = services
                .get_opt(svc_job)
                .await?
                .ok_or_else(|| anyhow!("no Service yet"))?;
            ensure!(
                service
                    .owner_references()
                    .iter()
                    .any(|o| o.controller == Some(true) && o.uid == uid),
                "Service owners {:?}",
                service.owner_references()
            );
            expect_eq(
                "its type",
                service.spec.and_then(|s| s.type_),
                Some("NodePort".to_string()),
            )?;
            let job = s.job(svc_job).await?;
            let degraded = job.status.as_ref().is_some_and(|st| {
                st.conditions
                    .iter()
                    .any(|c| c.type_ == "Degraded" && c.status == "True")
            });
            ensure!(!degraded, "conditions {:?}", conditions_of(&job));
            Ok(())
        },
    )
    .await?;
    println!("     Service {svc_job} deleted: the job created its own");

    // Its own Service, edited behind its back: applied back onto it (by its uid).
    let own_uid = services.get(svc_job).await?.uid();
    services
        .patch(
            svc_job,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "selector": { "app": "billing" } } })),
        )
        .await
        .context("editing the job's Service")?;
    eventually(
        "the job's Service selector to be put back",
        Duration::from_secs(60),
        || async {
            let service = services.get(svc_job).await?;
            let selector = service
                .spec
                .clone()
                .and_then(|s| s.selector)
                .unwrap_or_default();
            ensure!(
                !selector.contains_key("app") && selector.contains_key("vramfit.io/job-uid"),
                "selector {selector:?}"
            );
            expect_eq("the Service's uid", service.uid(), own_uid.clone())
        },
    )
    .await?;
    println!("     its own Service edited: applied back onto it");

    // A new port: the Service holds it alone (the create's field ownership is not left to
    // keep the old one, which would also clash by name with the new one).
    s.jobs()
        .patch(
            svc_job,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "serve": { "port": 9000 } } })),
        )
        .await
        .context("changing the job's port")?;
    eventually(
        "the job's Service to hold only the new port",
        Duration::from_secs(60),
        || async {
            let service = services.get(svc_job).await?;
            let ports: Vec<i32> = service
                .spec
                .clone()
                .and_then(|s| s.ports)
                .unwrap_or_default()
                .iter()
                .map(|p| p.port)
                .collect();
            expect_eq("the Service's ports", ports, vec![9000])?;
            expect_eq("the Service's uid", service.uid(), own_uid.clone())
        },
    )
    .await?;
    println!("     its port changed to 9000: the Service holds 9000 alone");
    let _ = pdbs.delete(pdb_job, &DeleteParams::default()).await;
    s.delete_jobs(&[svc_job.to_string(), pdb_job.to_string()])
        .await?;

    // A job named `kubernetes` in `default`: the API server's own Service is not touched.
    let default_services: Api<Service> = Api::namespaced(s.client.clone(), "default");
    let before = untouched_service(&default_services.get("kubernetes").await?);
    s.apply_job_in("default", served_job(s, "kubernetes", 1, &[H100]))
        .await?;
    let result = async {
        wait_degraded(s, "default", "kubernetes", "ServiceNameTaken").await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        expect_eq(
            "default/kubernetes",
            untouched_service(&default_services.get("kubernetes").await?),
            before,
        )
    }
    .await;
    remove_default_job(s).await?;
    result?;
    println!(
        "     default/kubernetes job: Degraded ServiceNameTaken, the API server's Service unchanged"
    );
    Ok(())
}

/// Deletes the job `default/kubernetes` and (forcefully: no kubelet confirms it) its pods.
async fn remove_default_job(s: &Suite) -> Result<()> {
    let jobs = s.jobs_in("default");
    let _ = jobs.delete("kubernetes", &DeleteParams::background()).await;
    eventually(
        "job default/kubernetes to be deleted",
        Duration::from_secs(30),
        || async {
            ensure!(jobs.get_opt("kubernetes").await?.is_none(), "still there");
            Ok(())
        },
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), "default");
    let listed = pods
        .list(&ListParams::default().labels("vramfit.io/job=kubernetes"))
        .await?;
    for pod in listed {
        let _ = pods
            .delete(&pod.name_any(), &DeleteParams::default().grace_period(0))
            .await;
    }
    Ok(())
}

/// Waits until the disruption controller has computed job `name`'s budget: observed its
/// generation and allows `allowed` disruptions.
async fn wait_budget(s: &Suite, name: &str, allowed: i32) -> Result<PodDisruptionBudget> {
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(s.client.clone(), &s.ns);
    eventually(
        &format!("PDB {name} to allow {allowed} disruption(s)"),
        Duration::from_secs(60),
        || async {
            let pdb = pdbs.get(name).await?;
            let status = pdb.status.clone().unwrap_or_default();
            ensure!(
                status.observed_generation == pdb.metadata.generation
                    && status.disruptions_allowed == allowed,
                "spec {:?}, status {status:?}",
                pdb.spec
            );
            Ok(pdb)
        },
    )
    .await
}

/// A drain of the node of a Ready replica whose job has two replicas and room for one (one
/// A10G node): the eviction is accepted (201). The budget used to count `serve.replicas`, so it
/// was refused (429) for as long as the other replica waited for room. Then, for a job whose two
/// replicas are both placed and Ready, the budget still takes them one at a time: the first
/// eviction is accepted, the second refused.
pub async fn drain_evicts_a_replica_while_another_waits_for_room(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(s.client.clone(), &s.ns);
    let name = "e2e-drain-waiting";
    s.apply_job(served_job(s, name, 2, &["a10g-x1"])).await?;
    wait_degraded(s, &s.ns, name, "NoClassFits").await?;
    let (_, pods) = s.wait_replicas(name, 1).await?;
    let pod = pods
        .first()
        .ok_or_else(|| anyhow!("no replica pod"))?
        .clone();
    s.set_pod_serving(&pod, true).await?;
    eventually("job ready 1/2", SETTLE, || async {
        let ready = s.job(name).await?.status.and_then(|st| st.ready);
        ensure!(ready.as_deref() == Some("1/2"), "ready {ready:?}");
        Ok(())
    })
    .await?;
    let (code, message) = s.evict(&s.ns, &pod.name_any()).await?;
    let budget = pdbs.get_opt(name).await?.map(|p| (p.spec, p.status));
    expect_eq(
        &format!(
            "eviction of the Ready replica {} ({message}; budget {budget:?})",
            pod.name_any()
        ),
        code,
        201,
    )?;
    ensure!(
        budget.is_none(),
        "a budget with one replica placed: {budget:?}"
    );
    println!(
        "     2 replicas, room for 1: eviction of {} -> {code}",
        pod.name_any()
    );
    s.delete_jobs(&[name.to_string()]).await?;

    // Both replicas placed and Ready: one at a time.
    let name = "e2e-drain-two";
    s.apply_job(served_job(s, name, 2, &[H100])).await?;
    let (_, pods) = s.wait_replicas(name, 2).await?;
    for pod in &pods {
        s.set_pod_serving(pod, true).await?;
    }
    let pdb = wait_budget(s, name, 1).await?;
    expect_eq(
        "the budget",
        pdb.spec.as_ref().and_then(|p| p.min_available.clone()),
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1)),
    )?;
    let (first, _) = s.evict(&s.ns, &pods[0].name_any()).await?;
    let (second, message) = s.evict(&s.ns, &pods[1].name_any()).await?;
    expect_eq("first eviction", first, 201)?;
    expect_eq(&format!("second eviction ({message})"), second, 429)?;
    println!("     2 Ready replicas: first eviction -> {first}, second -> {second}");

    // Scaled to three (the evicted pod gone, as a kubelet confirms it): the budget is resized
    // in place, applied onto the same object.
    s.confirm_deletions(&s.job(name).await?).await?;
    let pdb_uid = pdb.uid();
    s.jobs()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "serve": { "replicas": 3 } } })),
        )
        .await?;
    eventually(
        "the budget to be resized to minAvailable 2",
        SETTLE,
        || async {
            let pdb = pdbs.get(name).await?;
            expect_eq(
                "minAvailable",
                pdb.spec.as_ref().and_then(|p| p.min_available.clone()),
                Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(2)),
            )?;
            expect_eq("the budget's uid", pdb.uid(), pdb_uid.clone())
        },
    )
    .await?;
    println!("     scaled to 3: minAvailable 2 on the same budget");
    s.delete_jobs(&[name.to_string()]).await
}
