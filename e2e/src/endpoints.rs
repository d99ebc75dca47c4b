//! A Service's EndpointSlices as the control plane's EndpointSlice controller writes them: the
//! addresses it lists as ready.
use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Result, ensure};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};

use crate::{Suite, eventually};

impl Suite {
    /// The ready endpoints' addresses of the Service `service`, from its EndpointSlices.
    pub async fn ready_addresses(&self, service: &str) -> Result<BTreeSet<String>> {
        let slices: Api<EndpointSlice> = Api::namespaced(self.client.clone(), &self.ns);
        let list = slices
            .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={service}")))
            .await?;
        Ok(list
            .items
            .iter()
            .flat_map(|slice| &slice.endpoints)
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) == Some(true))
            .flat_map(|e| e.addresses.clone())
            .collect())
    }

    /// Waits until the Service's ready endpoints are exactly `want`.
    pub async fn wait_endpoints(&self, service: &str, want: &BTreeSet<String>) -> Result<()> {
        eventually(
            &format!("the EndpointSlice of {service} to list exactly {want:?} as ready"),
            Duration::from_secs(30),
            || async {
                let seen = self.ready_addresses(service).await?;
                ensure!(&seen == want, "ready addresses {seen:?}");
                Ok(())
            },
        )
        .await
    }
}
