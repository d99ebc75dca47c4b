//! HorizontalPodAutoscalers on the suite's jobs: the scenarios that show an HPA scaling a
//! job through its scale subresource, and vramfit's autoscaler standing aside for one.
use anyhow::{Context as _, Result};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use serde_json::json;

use crate::{MANAGER, Suite};

impl Suite {
    /// The namespace's `autoscaling/v2` HorizontalPodAutoscalers.
    pub fn hpas(&self) -> Api<DynamicObject> {
        let resource = ApiResource {
            group: "autoscaling".into(),
            version: "v2".into(),
            api_version: "autoscaling/v2".into(),
            kind: "HorizontalPodAutoscaler".into(),
            plural: "horizontalpodautoscalers".into(),
        };
        Api::namespaced_with(self.client.clone(), &self.ns, &resource)
    }

    /// Server-side applies HPA `name` targeting InferenceJob `job` with `min` to `max`
    /// replicas, on CPU (which no simulated pod reports: it never scales on its own).
    pub async fn apply_hpa(&self, name: &str, job: &str, min: u32, max: u32) -> Result<()> {
        let hpa = json!({
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name},
            "spec": {
                "scaleTargetRef": {"apiVersion": "vramfit.io/v1alpha1", "kind": "InferenceJob", "name": job},
                "minReplicas": min,
                "maxReplicas": max,
                "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}],
            }
        });
        self.hpas()
            .patch(
                name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&hpa),
            )
            .await
            .context("the API server accepts the HPA")?;
        Ok(())
    }
}
