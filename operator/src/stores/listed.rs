//! Which stores have their first full list, read without waiting. kube's
//! `Store::wait_until_ready` wakes only its latest poller: a task that polled a store the
//! controller's runner waits on (the job store) could leave the runner asleep. A task that only
//! needs to know whether a store is listed (the model cache sync: before every store it reads
//! is listed, its specs would be computed from nothing) reads these flags, set where each
//! watch's first `InitDone` is seen, after the store holds the list.
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A store whose first full list is tracked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listing {
    /// Nodes.
    Nodes,
    /// vramfit's pods.
    JobPods,
    /// GpuNodeClasses.
    NodeClasses,
    /// InferenceJobs.
    Jobs,
    /// ModelCaches (`--model-cache` only).
    ModelCaches,
}

impl Listing {
    /// Every tracked store.
    pub const ALL: [Listing; 5] = [
        Listing::Nodes,
        Listing::JobPods,
        Listing::NodeClasses,
        Listing::Jobs,
        Listing::ModelCaches,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

/// The stores listed so far, shared by every clone.
#[derive(Clone, Debug, Default)]
pub struct Listed(Arc<[AtomicBool; 5]>);

impl Listed {
    /// `which` has its first full list (a later relist keeps it so: kube's store keeps its
    /// objects until the new list is complete).
    pub fn mark(&self, which: Listing) {
        self.0[which.index()].store(true, Ordering::Release);
    }

    /// Whether `which` has had its first full list.
    pub fn is(&self, which: Listing) -> bool {
        self.0[which.index()].load(Ordering::Acquire)
    }

    /// Whether every one of `which` has.
    pub fn all(&self, which: &[Listing]) -> bool {
        which.iter().all(|w| self.is(*w))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_is_seen_by_every_clone_and_only_for_its_store() {
        let listed = Listed::default();
        let seen = listed.clone();
        assert!(!seen.is(Listing::Jobs));
        listed.mark(Listing::Jobs);
        assert!(seen.is(Listing::Jobs));
        assert!(!seen.all(&[Listing::Jobs, Listing::Nodes]));
        for which in Listing::ALL {
            listed.mark(which);
        }
        assert!(seen.all(&Listing::ALL));
    }
}
