//! The replica count a job's load asks for, before bounds, windows and rates.
//!
//! Replicas are not alike: each counts with the concurrency planned for its class, so a
//! saturated replica of 8 beside an idle one of 64 is a job at 8 of 72, not "half loaded".
//! Missing figures are taken the way HPA takes them: a Ready replica whose metrics could not
//! be read counts as idle when the load asks for more replicas and as full when it asks for
//! fewer, and a replica still starting counts as capacity on its way (idle) for a scale-up
//! and as full for a scale-down, so neither a failed read nor a slow start moves the job
//! further than its read replicas justify.
use super::load::{JobLoad, Replica, ReplicaState};

/// A change of load within this fraction of the target moves nothing (HPA's tolerance).
pub const TOLERANCE: f64 = 0.1;

/// What the recommendation is computed from.
#[derive(Clone, Copy, Debug)]
pub struct Load<'a> {
    /// The job's replicas that have a pod.
    pub replicas: &'a [Replica],
    /// Replicas the job asks for (`spec.serve.replicas`); those beyond `replicas` have no pod
    /// yet and count as starting.
    pub current: u32,
    /// Target utilisation, a fraction of the planned concurrency.
    pub target: f64,
    /// Concurrency of the replica the job would add next (its best class with room).
    pub next_capacity: u32,
}

/// Why the recommendation is what it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// No replica was read: the count stays.
    NoReading,
    /// The load is within the tolerance of the target.
    WithinTarget,
    /// Above the target, but the replicas starting cover it.
    Starting,
    /// Above the target: more replicas.
    AboveTarget,
    /// Below the target: fewer replicas.
    BelowTarget,
}

/// A replica count and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recommendation {
    /// Replicas.
    pub replicas: u32,
    /// Why.
    pub why: Why,
}

/// The replicas `load` asks for.
pub fn recommend(load: &Load) -> Recommendation {
    let keep = |why| Recommendation {
        replicas: load.current,
        why,
    };
    let read = JobLoad::of(load.replicas);
    let Some(utilization) = read.utilization() else {
        return keep(Why::NoReading);
    };
    let target = load.target.max(0.01);
    let ratio = utilization / target;
    if (ratio - 1.0).abs() <= TOLERANCE {
        return keep(Why::WithinTarget);
    }
    let without_pod = load.current.saturating_sub(count(load.replicas));
    let starting = capacity_where(load.replicas, |s| matches!(s, ReplicaState::Starting))
        + f64::from(without_pod) * f64::from(load.next_capacity);
    let unread = capacity_where(load.replicas, |s| matches!(s, ReplicaState::Unread));
    if ratio > 1.0 {
        // Unread and starting replicas are idle capacity here.
        let have = f64::from(read.read_capacity) + unread + starting;
        let want = read.demand / target;
        if have * (1.0 + TOLERANCE) >= want {
            return keep(Why::Starting);
        }
        let more = ((want - have) / f64::from(load.next_capacity.max(1))).ceil();
        return Recommendation {
            replicas: load.current.saturating_add(to_count(more)),
            why: Why::AboveTarget,
        };
    }
    // Unread and starting replicas are full here; the replicas without a pod go first, then
    // those of least capacity (the ones a scale-down removes).
    let want = (read.demand + unread + starting) / target;
    let mut capacities: Vec<f64> = load
        .replicas
        .iter()
        .map(|r| f64::from(r.capacity))
        .chain((0..without_pod).map(|_| f64::from(load.next_capacity)))
        .collect();
    let mut left: f64 = capacities.iter().sum();
    let mut kept = load.current;
    // Slots without a pod first (they are last in the list), then the least capable.
    let slots_without_pod = capacities.split_off(capacities.len() - without_pod as usize);
    capacities.sort_by(|a, b| a.total_cmp(b));
    for capacity in slots_without_pod.into_iter().chain(capacities) {
        if kept <= 1 || left - capacity < want {
            break;
        }
        left -= capacity;
        kept -= 1;
    }
    if kept == load.current {
        return keep(Why::WithinTarget);
    }
    Recommendation {
        replicas: kept,
        why: Why::BelowTarget,
    }
}

fn count(replicas: &[Replica]) -> u32 {
    u32::try_from(replicas.len()).unwrap_or(u32::MAX)
}

fn capacity_where(replicas: &[Replica], state: impl Fn(&ReplicaState) -> bool) -> f64 {
    replicas
        .iter()
        .filter(|r| state(&r.state))
        .map(|r| f64::from(r.capacity))
        .sum()
}

/// A non-negative float as a replica count (saturating).
fn to_count(value: f64) -> u32 {
    if value.is_finite() && value > 0.0 {
        value.min(f64::from(u32::MAX)) as u32
    } else {
        0
    }
}
