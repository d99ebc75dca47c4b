//! Tests of served jobs: the rules on a small world ([`rules`]), and the request sequences
//! of the real reconcile against the mock API server ([`api`]; the Service and budget written
//! only onto the job's own, and the budget's size: [`owned_objects`]).
mod adapters;
pub(crate) mod api;
mod owned_objects;
mod rules;
mod world;
