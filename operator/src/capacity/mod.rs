//! What the cluster can take (pure, from the stores): node classes and their nodes
//! ([`inventory`]), free GPUs per class for one job ([`room`]), and the pods this process has
//! created that no store shows yet ([`reservations`]).
pub use crate::stores::extended_resources;
pub mod inventory;
pub mod reservations;
pub mod room;

pub use inventory::{Inventory, NodeInfo, build_inventory};
pub use reservations::Reservations;
pub use room::{Capacity, ClassRoom, PodConstraints, tolerates};

#[cfg(test)]
mod inventory_fuzz;
#[cfg(test)]
mod tests;

/// The node label that names one node: a topology key for one pod per node.
pub const HOSTNAME_TOPOLOGY: &str = "kubernetes.io/hostname";
