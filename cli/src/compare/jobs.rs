//! The comparison's InferenceJobs (pure): deterministic names and the labels that tie them
//! to one comparison, so that a second invocation finds and re-attaches to them.
use std::collections::BTreeMap;
use std::fmt;

use kube::api::ObjectMeta;
use serde::Serialize;
use vramfit_api::InferenceJob;
use vramfit_api::labels::{is_valid_label_value, to_label_value};

use super::baseline::Derivation;

/// The comparison id, on every job.
pub const COMPARISON_LABEL: &str = "vramfit.io/comparison";
/// The class a job is pinned to.
pub const CLASS_LABEL: &str = "vramfit.io/comparison-class";
/// `baseline` or `optimized`.
pub const PHASE_LABEL: &str = "vramfit.io/comparison-phase";
/// 1 for the first run, up to --repeat.
pub const RUN_LABEL: &str = "vramfit.io/comparison-run";

/// Longest job name made: a DNS label, so that it doubles as a label value.
const MAX_NAME: usize = 63;

/// The two phases of a fair comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunPhase {
    /// The same generic settings on every class.
    Baseline,
    /// The class's own plan.
    Optimized,
}

impl RunPhase {
    /// The label value and report name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunPhase::Baseline => "baseline",
            RunPhase::Optimized => "optimized",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "baseline" => Some(RunPhase::Baseline),
            "optimized" => Some(RunPhase::Optimized),
            _ => None,
        }
    }
}

impl fmt::Display for RunPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which run a job is.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RunKey {
    /// The class.
    pub class: String,
    /// The phase.
    pub phase: RunPhase,
    /// 1-based run number.
    pub run: u32,
}

/// A job the comparison creates.
#[derive(Clone, Debug)]
pub struct PlannedJob {
    /// Which run it is.
    pub key: RunKey,
    /// The object to apply.
    pub job: InferenceJob,
}

impl PlannedJob {
    /// The job's name.
    pub fn name(&self) -> String {
        self.job.metadata.name.clone().unwrap_or_default()
    }
}

/// The comparison id: `--name`, else the job's metadata.name; lower-cased, as a label value.
pub fn comparison_id(flag: Option<&str>, job_name: Option<&str>) -> Result<String, String> {
    let raw = flag
        .or(job_name)
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .ok_or("the comparison needs a name: --name, or metadata.name in the manifest")?;
    let id = shorten(&dns_label(raw), MAX_NAME);
    if id.is_empty() || !is_valid_label_value(&id) {
        return Err(format!(
            "{raw:?} cannot name a comparison (letters, digits and -)"
        ));
    }
    Ok(id)
}

/// `<id>-<class>-<phase>-<run>`, cut to 63 characters with a hash of the whole when longer,
/// so that distinct runs never share a name.
pub fn job_name(id: &str, key: &RunKey) -> String {
    let name = format!(
        "{id}-{}-{}-{}",
        dns_label(&key.class),
        key.phase.as_str(),
        key.run
    );
    shorten(&name, MAX_NAME)
}

/// The labels of a run's job (the template job's own labels kept).
pub fn labels(
    id: &str,
    key: &RunKey,
    own: Option<&BTreeMap<String, String>>,
) -> BTreeMap<String, String> {
    let mut labels = own.cloned().unwrap_or_default();
    labels.extend([
        (COMPARISON_LABEL.to_string(), id.to_string()),
        (CLASS_LABEL.to_string(), label_value(&key.class)),
        (PHASE_LABEL.to_string(), key.phase.as_str().to_string()),
        (RUN_LABEL.to_string(), key.run.to_string()),
    ]);
    labels
}

/// The run a listed job is, from its labels (`None`: not one of ours).
pub fn key_of(job: &InferenceJob, id: &str) -> Option<RunKey> {
    let labels = job.metadata.labels.as_ref()?;
    if labels.get(COMPARISON_LABEL).map(String::as_str) != Some(id) {
        return None;
    }
    Some(RunKey {
        class: labels.get(CLASS_LABEL)?.clone(),
        phase: RunPhase::parse(labels.get(PHASE_LABEL)?)?,
        run: labels.get(RUN_LABEL)?.parse().ok()?,
    })
}

/// Every job of the comparison: per class, the baseline (where the class can run it) and
/// the optimized job, `repeat` times each, in class order.
pub fn planned_jobs(
    id: &str,
    namespace: &str,
    template: &InferenceJob,
    derivation: &Derivation,
    repeat: u32,
) -> Vec<PlannedJob> {
    let mut jobs = Vec::new();
    for setup in &derivation.classes {
        let phases = [
            (RunPhase::Baseline, setup.baseline_spec.as_ref()),
            (RunPhase::Optimized, setup.optimized_spec.as_ref()),
        ];
        for (phase, spec) in phases {
            let Some(spec) = spec else { continue };
            for run in 1..=repeat.max(1) {
                let key = RunKey {
                    class: setup.class.clone(),
                    phase,
                    run,
                };
                let mut job = InferenceJob::new(&job_name(id, &key), spec.clone());
                job.metadata = ObjectMeta {
                    name: Some(job_name(id, &key)),
                    namespace: Some(namespace.to_string()),
                    labels: Some(labels(id, &key, template.metadata.labels.as_ref())),
                    ..ObjectMeta::default()
                };
                jobs.push(PlannedJob { key, job });
            }
        }
    }
    jobs
}

/// Lower case, every run of other characters one `-`, no `-` at either end.
fn dns_label(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars().map(|c| c.to_ascii_lowercase()) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_string()
}

/// `name` when short enough, else its head and an FNV-1a hash of the whole.
fn shorten(name: &str, max: usize) -> String {
    if name.len() <= max {
        return name.to_string();
    }
    let hash = format!("-{:08x}", fnv1a(name.as_bytes()) as u32);
    let head: String = name.chars().take(max - hash.len()).collect();
    format!("{}{hash}", head.trim_end_matches('-'))
}

/// A class name as a label value (class names are, except made-up long ones).
fn label_value(name: &str) -> String {
    if is_valid_label_value(name) {
        name.to_string()
    } else {
        shorten(&to_label_value(name), MAX_NAME)
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(class: &str, phase: RunPhase, run: u32) -> RunKey {
        RunKey {
            class: class.into(),
            phase,
            run,
        }
    }

    #[test]
    fn names_are_deterministic_dns_labels() {
        let k = key("a100-80gb-mig-3g.40gb", RunPhase::Baseline, 2);
        assert_eq!(
            job_name("captions", &k),
            "captions-a100-80gb-mig-3g-40gb-baseline-2"
        );
        assert_eq!(job_name("captions", &k), job_name("captions", &k));
        let long = "x".repeat(60);
        let a = job_name(&long, &key("a10g-x1", RunPhase::Baseline, 1));
        let b = job_name(&long, &key("a10g-x1", RunPhase::Optimized, 1));
        assert!(a.len() <= 63 && b.len() <= 63);
        assert_ne!(a, b, "the hash keeps long names apart");
    }

    #[test]
    fn the_id_comes_from_the_flag_or_the_job() {
        assert_eq!(comparison_id(Some("My_Run"), Some("j")).unwrap(), "my-run");
        assert_eq!(
            comparison_id(None, Some("internvl3-captions")).unwrap(),
            "internvl3-captions"
        );
        assert!(comparison_id(None, None).is_err());
        assert!(comparison_id(Some("___"), None).is_err());
    }

    #[test]
    fn labels_round_trip_to_the_run() {
        let k = key("h200-x8", RunPhase::Optimized, 3);
        let mut job = InferenceJob::new(
            "x",
            serde_yaml::from_str(
                "model: {preset: internvl3-8b}\nruntime: transformers\nimage: img\n",
            )
            .unwrap(),
        );
        job.metadata.labels = Some(labels("cmp", &k, None));
        assert_eq!(key_of(&job, "cmp"), Some(k));
        assert_eq!(key_of(&job, "other"), None);
    }
}
