//! The CRD YAML, generated from the Rust types (the one source of truth).
use kube::CustomResourceExt;

use crate::{GpuNodeClass, InferenceJob, ModelCache};

/// Every CRD, as `(file name, YAML)`, in a stable order.
pub fn crd_documents() -> Result<Vec<(&'static str, String)>, serde_yaml::Error> {
    Ok(vec![
        (
            "inferencejobs.vramfit.io.yaml",
            serde_yaml::to_string(&InferenceJob::crd())?,
        ),
        (
            "gpunodeclasses.vramfit.io.yaml",
            serde_yaml::to_string(&GpuNodeClass::crd())?,
        ),
        (
            "modelcaches.vramfit.io.yaml",
            serde_yaml::to_string(&ModelCache::crd())?,
        ),
    ])
}

/// All CRDs as one multi-document YAML stream.
pub fn all_crds_yaml() -> Result<String, serde_yaml::Error> {
    Ok(crd_documents()?
        .into_iter()
        .map(|(_, yaml)| format!("---\n{yaml}"))
        .collect())
}
