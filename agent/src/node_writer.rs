//! Writing the agent's labels onto its own Node.
//!
//! Server-side apply under the field manager [`FIELD_MANAGER`], with a patch that holds only
//! `metadata.labels` with the `vramfit.io/` keys: the API server then removes the keys this
//! manager applied before and no longer applies (stale labels disappear), and never touches
//! anybody else's labels. `force` takes over keys someone else set by hand.
//!
//! The writer remembers what the node carries, so at steady state it sends nothing: one GET
//! when it starts, then an apply only when the rendered labels change.
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};
use tracing::{debug, info};

use crate::labels::{NodeLabels, own_labels};

/// The field manager of every apply this agent sends.
pub const FIELD_MANAGER: &str = "vramfit-agent";

/// A failed API call; the caller retries with backoff.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Reading the node failed.
    #[error("reading node {node}: {source}")]
    Get {
        /// The node.
        node: String,
        /// Why.
        source: kube::Error,
    },
    /// Applying the labels failed.
    #[error("applying labels to node {node}: {source}")]
    Apply {
        /// The node.
        node: String,
        /// Why.
        source: kube::Error,
    },
}

/// What a sync did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncOutcome {
    /// The node already carried exactly these labels; nothing was sent.
    AlreadyCurrent,
    /// The labels were applied.
    Written,
}

/// Keeps one node's `vramfit.io/` labels equal to the rendered set.
pub struct NodeWriter {
    api: Api<Node>,
    node_name: String,
    /// The `vramfit.io/` labels the node is known to carry; `None` until the first GET.
    on_node: Option<NodeLabels>,
}

impl NodeWriter {
    /// A writer for the node `node_name`.
    pub fn new(client: Client, node_name: impl Into<String>) -> Self {
        Self {
            api: Api::all(client),
            node_name: node_name.into(),
            on_node: None,
        }
    }

    /// The node written to.
    pub fn node_name(&self) -> &str {
        &self.node_name
    }

    /// Makes the node carry `desired` as its `vramfit.io/` labels, sending an apply only if
    /// it does not already.
    pub async fn sync(&mut self, desired: &NodeLabels) -> Result<SyncOutcome, WriteError> {
        if self.on_node.is_none() {
            let node = self
                .api
                .get(&self.node_name)
                .await
                .map_err(|source| WriteError::Get {
                    node: self.node_name.clone(),
                    source,
                })?;
            let current = own_labels(node.metadata.labels.as_ref().unwrap_or(&Default::default()));
            debug!(node = %self.node_name, labels = current.len(), "read the node's vramfit labels");
            self.on_node = Some(current);
        }
        if self.on_node.as_ref() == Some(desired) {
            return Ok(SyncOutcome::AlreadyCurrent);
        }
        let params = PatchParams::apply(FIELD_MANAGER).force();
        self.api
            .patch(
                &self.node_name,
                &params,
                &Patch::Apply(apply_body(&self.node_name, desired)),
            )
            .await
            .map_err(|source| WriteError::Apply {
                node: self.node_name.clone(),
                source,
            })?;
        info!(node = %self.node_name, labels = desired.len(), "applied vramfit labels");
        self.on_node = Some(desired.clone());
        Ok(SyncOutcome::Written)
    }
}

/// The server-side apply body: the node's identity and our labels, nothing else.
pub fn apply_body(node_name: &str, labels: &NodeLabels) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node_name,
            "labels": labels,
        },
    })
}
