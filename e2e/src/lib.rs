//! The harness of vramfit's end-to-end suite (`tests/e2e.rs`, scenarios in
//! `tests/scenarios/`) and of the `operator-scale` benchmark. One module per job:
//!
//! * [`cluster`]: whether the suite can run (KUBECONFIG), run ids, names and labels.
//! * [`suite`]: the [`Suite`] the scenarios share, and its set-up; [`cleanup`](mod@cleanup):
//!   removing it.
//! * [`crds`], [`namespaces`]: the CRDs and the test namespace on the cluster.
//! * [`nodes`]: the simulated GPU nodes; [`pods`]: their pods and the simulated kubelet.
//! * [`endpoints`]: the addresses a Service's EndpointSlices list as ready.
//! * [`groups`](mod@groups): groups of pods across nodes, the nodes their scenarios add, and
//!   what a placed group must look like.
//! * [`jobs`]: creating, reading, waiting for and deleting InferenceJobs; [`volumes`]: the
//!   storage the examples mount.
//! * [`processes`]: the operator and agent binaries as child processes, [`cache_agent`]: the
//!   node cache agent's; [`http`]: their
//!   `/readyz` and `/metrics`; [`kubectl`](mod@kubectl): `kubectl` and its tables.
//! * [`checks`]: what a placed job and its pod must look like; [`poll`]: waiting with
//!   timeouts; [`manifests`]: YAML from the workspace; [`rbac`]: the operator's install RBAC.
//! * [`hub`]: a local HTTP server playing the Hugging Face Hub (`--hub-endpoint`).
//! * [`real_node`]: a node with a real kubelet, for the scenarios that run real pods.
//! * [`metrics`]: what the benchmark measures.
//! * [`prometheus`]: a real Prometheus scraping the binaries; [`dashboards`]: the Grafana
//!   dashboards' queries and what a panel needs from their answers.
//!
//! Everything is re-exported at the crate root, so `use vramfit_e2e::*` is enough.
#![forbid(unsafe_code)]

pub mod cache_agent;
pub mod checks;
pub mod cleanup;
pub mod cluster;
pub mod crds;
pub mod dashboards;
pub mod endpoints;
pub mod gguf;
pub mod groups;
pub mod hpa;
pub mod http;
pub mod hub;
pub mod jobs;
pub mod kubectl;
pub mod manifests;
pub mod metrics;
pub mod model_hub;
pub mod namespaces;
pub mod nodes;
pub mod pods;
pub mod poll;
pub mod processes;
pub mod prometheus;
pub mod rbac;
pub mod real_node;
pub mod replica_metrics;
pub mod suite;
pub mod volumes;

pub use cache_agent::*;
pub use checks::*;
pub use cleanup::*;
pub use cluster::*;
pub use groups::*;
pub use http::*;
pub use jobs::*;
pub use kubectl::*;
pub use manifests::*;
pub use metrics::*;
pub use nodes::*;
pub use pods::*;
pub use poll::*;
pub use processes::*;
pub use real_node::*;
pub use suite::*;
pub use volumes::*;
