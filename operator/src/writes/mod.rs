//! The API writes every pipeline shares, each with field ownership (server-side apply under
//! the operator's field manager, or a create that never takes over someone else's object):
//! [`pods`] (delete, create, apply; reservations), [`ownership`] (a job's own Services,
//! budgets and policies), [`volumes`] (a model cache claim and its volume), [`status`] (the
//! job's status, its events and metrics), of what one reconcile decided ([`crate::attempts::Decision`],
//! [`crate::replicas::decide::ServedDecision`]).
pub mod inference_pool;
pub mod ownership;
pub mod pods;
pub mod scale;
pub mod served;
pub mod status;
pub mod volumes;
