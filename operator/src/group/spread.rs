//! Where a group's pods may go relative to one another (the operator's `--group-spread`).

/// How a group's pods spread over nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum GroupSpread {
    /// One pod of a group per node (required pod anti-affinity on `kubernetes.io/hostname`),
    /// as the plan assumes: each rank has a node's planned GPUs and its own PCIe and network.
    #[default]
    Node,
    /// Ranks may share a node that has GPUs free for several of them: no anti-affinity, and
    /// room is counted in whole pods per node. For trying a group on a single node (a
    /// development cluster); ranks on one node still talk over the network, not NVLink.
    None,
}

impl GroupSpread {
    /// Whether a group's pods must each have a node of their own.
    pub fn one_pod_per_node(self) -> bool {
        self == GroupSpread::Node
    }
}
