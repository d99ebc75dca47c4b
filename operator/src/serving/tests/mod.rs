//! Tests of served jobs: the rules on a small world ([`rules`]), and the request sequences
//! of the real reconcile against the mock API server ([`api`]).
mod api;
mod rules;
mod world;
