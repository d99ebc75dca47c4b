//! The storage the examples' pods mount: a PersistentVolume per claim, bound to it.
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::{MANAGER, PREFIX, RUN_LABEL, Suite, eventually};

/// A PersistentVolume reserved for `claim` and the claim bound to it (the persistent-volume
/// controller completes the binding). The volume is a host path: no pod ever runs here.
pub fn claim_volume(volume: &str, claim: &str, namespace: &str, run: &str) -> (Value, Value) {
    let labels = json!({ RUN_LABEL: run });
    let pv = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": volume, "labels": labels},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "hostPath": {"path": format!("/var/tmp/{volume}")},
            "claimRef": {"namespace": namespace, "name": claim},
        },
    });
    let pvc = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "namespace": namespace, "labels": labels},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": volume,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    });
    (pv, pvc)
}

impl Suite {
    /// Creates the PersistentVolumeClaims a job's pod mounts, each bound to a PersistentVolume
    /// of its own (as a storage admin would have), so the scheduler can place the pod.
    pub async fn provide_claims(&self, job: &Value) -> Result<()> {
        let claims: Vec<String> = job["spec"]["pod"]["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v["persistentVolumeClaim"]["claimName"].as_str())
            .map(str::to_string)
            .collect();
        let volumes: Api<PersistentVolume> = Api::all(self.client.clone());
        let claims_api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &self.ns);
        for claim in claims {
            let volume = format!("{PREFIX}{}-{claim}", self.run);
            let spec = claim_volume(&volume, &claim, &self.ns, &self.run);
            volumes
                .patch(
                    &volume,
                    &PatchParams::apply(MANAGER),
                    &Patch::Apply(&spec.0),
                )
                .await
                .with_context(|| format!("creating PersistentVolume {volume}"))?;
            self.cleanup
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .cluster_objects
                .push(("PersistentVolume".into(), volume.clone()));
            claims_api
                .patch(&claim, &PatchParams::apply(MANAGER), &Patch::Apply(&spec.1))
                .await
                .with_context(|| format!("creating PersistentVolumeClaim {claim}"))?;
            eventually(
                &format!("claim {claim} to be bound to {volume}"),
                Duration::from_secs(60),
                || async {
                    let phase = claims_api.get(&claim).await?.status.and_then(|st| st.phase);
                    ensure!(phase.as_deref() == Some("Bound"), "phase {phase:?}");
                    Ok(())
                },
            )
            .await?;
        }
        Ok(())
    }
}
