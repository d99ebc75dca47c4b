//! Writing the agent's labels onto its own Node.
//!
//! Server-side apply under the field manager [`FIELD_MANAGER`], with a patch that holds only
//! `metadata.labels` with the `vramfit.io/` keys: the API server then removes the keys this
//! manager applied before and no longer applies (stale labels disappear), and never touches
//! anybody else's labels. `force` takes over keys someone else set by hand.
//!
//! The writer remembers what the node carries, so at steady state it sends nothing: one GET
//! when it starts, then an apply only when the rendered labels change. What it remembers
//! goes stale when someone else edits the node's `vramfit.io/` labels, so a slow
//! [`NodeWriter::repair`] reads the node again and puts them back (one GET, and a write only
//! when they differ).
//!
//! A `vramfit.io/` key someone else added is owned by their field manager, so an apply
//! leaves it in place; the writer removes it with a merge patch after the apply. Every
//! `vramfit.io/` label on the node is the agent's to say (the operator plans from them).
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Map, Value, json};
use tracing::{debug, info, warn};

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
    /// Removing `vramfit.io/` labels someone else added failed.
    #[error("removing foreign vramfit.io/ labels {keys:?} from node {node}: {source}")]
    RemoveForeign {
        /// The node.
        node: String,
        /// The keys.
        keys: Vec<String>,
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
    /// A repair found the node's labels changed by someone else and put them back.
    Repaired,
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
    /// it does not already (as far as this writer knows: it reads the node only the first
    /// time, and after that trusts its own writes; see [`NodeWriter::repair`]).
    pub async fn sync(&mut self, desired: &NodeLabels) -> Result<SyncOutcome, WriteError> {
        if self.on_node.is_none() {
            self.on_node = Some(self.read().await?);
        }
        if self.on_node.as_ref() == Some(desired) {
            return Ok(SyncOutcome::AlreadyCurrent);
        }
        self.write(desired).await?;
        Ok(SyncOutcome::Written)
    }

    /// Reads the node again, whatever this writer believes it carries, and puts `desired`
    /// back if its `vramfit.io/` labels differ: someone changed, removed or added one. One
    /// GET, and no write when nothing differs.
    pub async fn repair(&mut self, desired: &NodeLabels) -> Result<SyncOutcome, WriteError> {
        let on_node = self.read().await?;
        // The probe may have changed too; only a node that no longer carries what this
        // writer last wrote or read was changed by someone else.
        let tampered = self.on_node.as_ref().is_some_and(|b| b != &on_node);
        if &on_node == desired {
            self.on_node = Some(on_node);
            return Ok(SyncOutcome::AlreadyCurrent);
        }
        if tampered {
            let (changed, added) = differences(desired, &on_node);
            warn!(node = %self.node_name, ?changed, ?added, "the node's vramfit labels were changed by someone else; putting them back");
        }
        // What the node carries now, should the write fail.
        self.on_node = Some(on_node);
        self.write(desired).await?;
        Ok(if tampered {
            SyncOutcome::Repaired
        } else {
            SyncOutcome::Written
        })
    }

    /// GETs the node; its `vramfit.io/` labels.
    async fn read(&mut self) -> Result<NodeLabels, WriteError> {
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
        Ok(current)
    }

    /// Applies `desired`, then removes the `vramfit.io/` keys the apply left because
    /// another field manager owns them. Remembers `desired` only once both succeeded.
    async fn write(&mut self, desired: &NodeLabels) -> Result<(), WriteError> {
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let after = self
            .api
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
        let foreign: Vec<String> = own_labels(
            after
                .metadata
                .labels
                .as_ref()
                .unwrap_or(&Default::default()),
        )
        .into_keys()
        .filter(|key| !desired.contains_key(key))
        .collect();
        if !foreign.is_empty() {
            warn!(node = %self.node_name, keys = ?foreign, "removing vramfit labels set by someone else");
            let params = PatchParams {
                field_manager: Some(FIELD_MANAGER.to_string()),
                ..PatchParams::default()
            };
            self.api
                .patch(
                    &self.node_name,
                    &params,
                    &Patch::Merge(removal_body(&foreign)),
                )
                .await
                .map_err(|source| WriteError::RemoveForeign {
                    node: self.node_name.clone(),
                    keys: foreign.clone(),
                    source,
                })?;
        }
        self.on_node = Some(desired.clone());
        Ok(())
    }
}

/// The keys whose value on the node differs from `desired` (missing included), and the keys
/// the node has that `desired` does not.
fn differences(desired: &NodeLabels, on_node: &NodeLabels) -> (Vec<String>, Vec<String>) {
    let changed = desired
        .iter()
        .filter(|(key, value)| on_node.get(*key) != Some(*value))
        .map(|(key, _)| key.clone())
        .collect();
    let added = on_node
        .keys()
        .filter(|key| !desired.contains_key(*key))
        .cloned()
        .collect();
    (changed, added)
}

/// A JSON merge patch that removes `keys` from the node's labels.
pub fn removal_body(keys: &[String]) -> Value {
    let labels: Map<String, Value> = keys.iter().map(|key| (key.clone(), Value::Null)).collect();
    json!({ "metadata": { "labels": labels } })
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
