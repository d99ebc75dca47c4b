//! A served job's replicas decided (pure): follow each replica's pod ([`pod_state`],
//! [`failure`], with the shared [`crate::backoff`]), scale down ([`scale`]), roll onto a new
//! spec ([`rollout`]), scale up onto the best class with room ([`placement`]), with the node
//! model cache's choice ([`cache_hook`]); the objects built: a replica's pod ([`pod`]), the
//! Service ([`service`]), the PodDisruptionBudget ([`pdb`]); status and conditions
//! ([`summary`]). [`decide`] runs them in order. Used by served jobs of one pod per replica
//! ([`crate::served`]) and of a group per replica ([`crate::group`]).
pub mod adapter_lines;
pub mod cache_hook;
pub mod decide;
pub mod failure;
pub mod inference_pool;
pub mod pdb;
pub mod placement;
pub mod pod;
pub mod pod_state;
pub mod rollout;
pub mod scale;
pub mod service;
pub mod summary;
