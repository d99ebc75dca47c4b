//! Writing the ModelCache's status: a server-side apply of the status subresource under the
//! field manager [`FIELD_MANAGER`], forced (the status is this agent's alone), holding the
//! object's identity and the status, nothing else.
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use vramfit_api::model_cache::{ModelCache, ModelCacheStatus};

/// The field manager of every status apply.
pub const FIELD_MANAGER: &str = "vramfit-cache-agent";

/// Writes one node's ModelCache status.
#[derive(Clone)]
pub struct StatusWriter {
    api: Api<ModelCache>,
    node_name: String,
}

impl StatusWriter {
    /// A writer for the ModelCache named `node_name`.
    pub fn new(client: Client, node_name: impl Into<String>) -> Self {
        Self {
            api: Api::all(client),
            node_name: node_name.into(),
        }
    }

    /// The ModelCache written to.
    pub fn node_name(&self) -> &str {
        &self.node_name
    }

    /// Applies `status`.
    pub async fn write(&self, status: &ModelCacheStatus) -> Result<(), kube::Error> {
        let params = PatchParams::apply(FIELD_MANAGER).force();
        self.api
            .patch_status(
                &self.node_name,
                &params,
                &Patch::Apply(apply_body(&self.node_name, status)),
            )
            .await
            .map(|_| ())
    }
}

/// The apply body: the object's identity and its status.
pub fn apply_body(node_name: &str, status: &ModelCacheStatus) -> Value {
    json!({
        "apiVersion": "vramfit.io/v1alpha1",
        "kind": "ModelCache",
        "metadata": { "name": node_name },
        "status": status,
    })
}
