//! Faults for tests, never in a release build: this module exists only in unit tests and in
//! binaries built with the `fault-injection` feature (the e2e suite's), which no release
//! image or chart uses.
//!
//! * [`RECONCILE_PANIC_ENV`] (job names, comma-separated): the reconcile of a job of that name
//!   panics, inside the reconcile boundary (while it holds the placement lock, as a panicking
//!   planner would). It must stay that job's problem.
//! * [`CONTROLLER_PANIC_ENV`] (job names): once a job of that name was reconciled, the
//!   controller itself panics, outside the reconcile boundary. The controller task ends and
//!   the process must exit non-zero rather than stay ready with nothing reconciled.
use std::collections::BTreeSet;
use std::sync::{PoisonError, RwLock};

/// The jobs whose reconcile panics.
pub const RECONCILE_PANIC_ENV: &str = "VRAMFIT_FAULT_PANIC_IN_RECONCILE";
/// The jobs after whose reconcile the controller panics.
pub const CONTROLLER_PANIC_ENV: &str = "VRAMFIT_FAULT_PANIC_IN_CONTROLLER";

static RECONCILE_PANICS: RwLock<BTreeSet<String>> = RwLock::new(BTreeSet::new());
static CONTROLLER_PANICS: RwLock<BTreeSet<String>> = RwLock::new(BTreeSet::new());

/// Arms the faults the environment names, and says so in the log.
pub fn arm_from_env() {
    for (variable, set) in [
        (RECONCILE_PANIC_ENV, &RECONCILE_PANICS),
        (CONTROLLER_PANIC_ENV, &CONTROLLER_PANICS),
    ] {
        let names = std::env::var(variable).unwrap_or_default();
        for name in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            tracing::warn!(variable, job = name, "fault injection armed");
            arm(set, name);
        }
    }
}

fn arm(set: &RwLock<BTreeSet<String>>, job: &str) {
    set.write()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(job.to_string());
}

fn armed(set: &RwLock<BTreeSet<String>>, job: &str) -> bool {
    set.read()
        .unwrap_or_else(PoisonError::into_inner)
        .contains(job)
}

/// Makes every reconcile of a job named `job` panic (tests: use a name no other test uses).
#[cfg(test)]
pub fn panic_in_reconcile_of(job: &str) {
    arm(&RECONCILE_PANICS, job);
}

/// Called inside the reconcile of `job`: panics when armed for it.
pub fn reconcile_checkpoint(job: &str) {
    if armed(&RECONCILE_PANICS, job) {
        panic!("fault injection: the reconcile of {job} panics");
    }
}

/// Called by the controller after a reconcile of `job`, outside the reconcile boundary:
/// panics when armed for it.
pub fn controller_checkpoint(job: &str) {
    if armed(&CONTROLLER_PANICS, job) {
        panic!("fault injection: the controller panics after reconciling {job}");
    }
}
