//! A deleted job's pods are collected by the garbage collector (kube-controller-manager).
use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use kube::ResourceExt as _;
use kube::api::{DeleteParams, ListParams};
use vramfit_e2e::{Suite, check_placed_job, eventually};

/// A deleted job's pods carry the controller owner reference the garbage collector needs;
/// where a controller manager runs, they disappear.
pub async fn garbage_collection(s: &mut Suite) -> Result<()> {
    s.ensure_single_operator().await?;
    let name = "e2e-gc";
    s.apply_job(s.own_job(name, 3)).await?;
    let (job, pod) = s.wait_pod(name, 1).await?;
    let nodes = s.sim_nodes().await?;
    check_placed_job(&job, &pod, &nodes)?;
    s.jobs().delete(name, &DeleteParams::background()).await?;
    s.wait_job_deleted(name).await?;
    let gone = eventually(
        &format!("pod {} to be garbage-collected", pod.name_any()),
        Duration::from_secs(30),
        || async {
            let left: BTreeSet<String> = s
                .pods()
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                // A collected pod bound to a node stays Terminating until its kubelet
                // confirms; the garbage collector's part is the deletion request.
                .filter(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && p.owner_references()
                            .iter()
                            .any(|o| Some(&o.uid) == job.uid().as_ref())
                })
                .map(|p| p.name_any())
                .collect();
            ensure!(left.is_empty(), "pods {left:?} remain, not being deleted");
            Ok(())
        },
    )
    .await;
    // No kubelet here to finish the deletion: end it as one would.
    let _ = s
        .pods()
        .delete(&pod.name_any(), &DeleteParams::default().grace_period(0))
        .await;
    gone.context(
        "the garbage collector (kube-controller-manager) should delete the pods of a deleted job",
    )?;
    println!("     the garbage collector deleted the job's pod");
    Ok(())
}
