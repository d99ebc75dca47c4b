//! A served job's load, in units of its replicas' planned concurrency.

/// What one replica's metrics said.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Reading {
    /// Requests being served.
    pub running: f64,
    /// Requests queued (vLLM's waiting, llama.cpp's deferred).
    pub waiting: f64,
    /// The KV cache's fill, 0 to 1, where the runtime says.
    pub kv_cache_usage: Option<f64>,
}

impl Reading {
    /// The replica's utilisation of its planned concurrency `capacity`: requests in flight
    /// over it, or its KV cache's fill where that is higher (a cache full of long prompts
    /// serves fewer sequences than planned). Negative or non-finite figures count as zero.
    pub fn utilization(&self, capacity: u32) -> f64 {
        let requests = finite(self.running) + finite(self.waiting);
        let by_requests = requests / f64::from(capacity.max(1));
        by_requests.max(self.kv_cache_usage.map_or(0.0, finite))
    }
}

fn finite(value: f64) -> f64 {
    if value.is_finite() {
        value.max(0.0)
    } else {
        0.0
    }
}

/// A replica of the job as the autoscaler counts it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Replica {
    /// Sequences it serves at once, as planned for its class.
    pub capacity: u32,
    /// What is known of its load.
    pub state: ReplicaState,
}

/// Whether a replica's load is known.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ReplicaState {
    /// Ready, and its metrics were read.
    Read(Reading),
    /// Ready, but its metrics could not be read.
    Unread,
    /// Not Ready yet (loading its model, or waiting for a node): capacity on its way.
    Starting,
}

/// The job's load over the replicas whose metrics were read.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct JobLoad {
    /// Requests in flight, in units of the read replicas' concurrency (Σ utilisation ×
    /// capacity).
    pub demand: f64,
    /// Σ planned concurrency of the read replicas.
    pub read_capacity: u32,
    /// Replicas read.
    pub read: u32,
}

impl JobLoad {
    /// Sums the read replicas of `replicas`.
    pub fn of(replicas: &[Replica]) -> Self {
        replicas.iter().fold(JobLoad::default(), |sum, replica| {
            let ReplicaState::Read(reading) = replica.state else {
                return sum;
            };
            JobLoad {
                demand: sum.demand
                    + reading.utilization(replica.capacity) * f64::from(replica.capacity),
                read_capacity: sum.read_capacity.saturating_add(replica.capacity),
                read: sum.read + 1,
            }
        })
    }

    /// Demand over capacity; `None` when nothing was read.
    pub fn utilization(&self) -> Option<f64> {
        (self.read_capacity > 0).then(|| self.demand / f64::from(self.read_capacity))
    }
}
