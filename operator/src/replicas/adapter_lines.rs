//! Which adapters each replica serves (`replicaStatuses[].adapters`), read back from its pod's
//! `vramfit.io/adapters` annotation: during a rolling update onto a new list, the lines show
//! which replicas serve it yet.
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use super::decide::Draft;
use crate::pod::PodSeen;
use crate::pod::build::adapter_volumes::served_adapters;

impl Draft<'_> {
    /// The pod of line `index`: the one this decision creates, else the one the stores show
    /// (shared, not copied).
    pub(super) fn line_pod(&self, index: usize) -> Option<Arc<Pod>> {
        let name = &self.lines[index].pod_name;
        let created = self
            .create_pods
            .iter()
            .find(|(p, _)| &p.name_any() == name)
            .map(|(p, _)| Arc::new(p.clone()));
        created.or_else(|| match (self.obs.pods)(name) {
            PodSeen::Observed(pod) => Some(pod),
            _ => None,
        })
    }

    /// Each replica's adapters, from its pod (none for a replica without one). A job that
    /// names no adapter and whose lines list none has nothing to read: its pods are not
    /// looked up again.
    pub(super) fn adapter_lines(&mut self) {
        let named = self
            .obs
            .job
            .spec
            .serve
            .as_ref()
            .is_some_and(|s| !s.adapters.is_empty());
        if !named && self.lines.iter().all(|l| l.adapters.is_empty()) {
            return;
        }
        for index in 0..self.lines.len() {
            let served = self
                .line_pod(index)
                .map(|pod| served_adapters(pod.metadata.annotations.as_ref()))
                .unwrap_or_default();
            self.lines[index].adapters = served;
        }
    }
}
