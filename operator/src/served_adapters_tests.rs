use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::Event;
use vramfit_api::adapters::{AdapterSpec, TrainedAdapter, TuningJobRef};
use vramfit_api::conditions::{self, ConditionType, Reason};
use vramfit_api::workload_report::{JobResult, WorkSummary};
use vramfit_api::{InferenceJob, Phase};

use super::*;
use crate::fixtures;

fn now() -> Time {
    Time(Timestamp::now())
}

/// A LoRA run of Mistral-7B that wrote to claim `claim` and, when `trained`, succeeded and
/// reported its adapter.
fn tuning(name: &str, claim: &str, trained: bool) -> InferenceJob {
    let spec = fixtures::spec_from_json(&format!(
        r#"{{"model": {{"preset": "mistral-7b-instruct-v0.3"}}, "runtime": "transformers",
            "image": "trainer:1", "tuning": {{"method": "lora", "outputVolume": "out"}},
            "pod": {{"volumes": [{{"name": "out", "persistentVolumeClaim": {{"claimName": "{claim}"}}}}]}}}}"#
    ));
    let mut job = fixtures::job(name, spec);
    if trained {
        let status = job.status.get_or_insert_default();
        status.phase = Some(Phase::Succeeded);
        let mut result = JobResult::of(
            &WorkSummary {
                items: 1,
                seconds: 1.0,
                peak_gpu_memory_mib: Vec::new(),
            },
            0,
        );
        result.adapter = Some(TrainedAdapter {
            files: vec![
                "adapter_config.json".into(),
                "adapter_model.safetensors".into(),
            ],
            rank: 16,
            alpha: Some(32.0),
            target_modules: vec!["q_proj".into(), "v_proj".into()],
            base_model: Some("mistralai/Mistral-7B-Instruct-v0.3".into()),
            bytes: Some(13_631_488),
        });
        status.result = Some(result);
    }
    job
}

/// A served vLLM Mistral job naming `adapters` (each a tuning job of its name).
fn served(adapters: &[&str]) -> InferenceJob {
    let mut spec = fixtures::vllm_mistral_spec();
    let serve = spec.serve.get_or_insert_default();
    serve.adapters = adapters
        .iter()
        .map(|a| AdapterSpec {
            name: (*a).to_string(),
            tuning_job: TuningJobRef {
                name: (*a).to_string(),
            },
        })
        .collect();
    fixtures::job("chat", spec)
}

fn store(jobs: &[InferenceJob]) -> Store<CachedJob> {
    let (reader, mut writer) = reflector::store::<CachedJob>();
    for job in jobs {
        writer.apply_watcher_event(&Event::Apply(CachedJob::of(job)));
    }
    reader
}

#[test]
fn a_job_without_adapters_needs_nothing() {
    assert!(matches!(
        prepare(&served(&[]), &store(&[])),
        AdapterStep::None
    ));
}

#[test]
fn an_accepted_adapter_brings_its_output_volume_and_its_numbers() {
    let jobs = store(&[tuning("sql", "sql-out", true)]);
    let AdapterStep::Ready { filled, changed } = prepare(&served(&["sql"]), &jobs) else {
        panic!("a succeeded LoRA run of the served model is accepted");
    };
    assert!(changed, "a first list differs from none");
    let volume = filled
        .spec
        .pod
        .as_ref()
        .unwrap()
        .volumes
        .iter()
        .find(|v| v.name == "vramfit-adapter-sql")
        .expect("the tuning job's output volume, renamed");
    assert_eq!(
        volume.persistent_volume_claim.as_ref().unwrap().claim_name,
        "sql-out"
    );
    let adapters = &filled.status.as_ref().unwrap().adapters;
    assert_eq!(adapters.len(), 1);
    assert_eq!(
        (adapters[0].rank, adapters[0].source.as_str()),
        (16, "tuningJob/sql")
    );

    // Planned again from the recorded list: nothing changed.
    let mut again = served(&["sql"]);
    again.status = filled.status.clone();
    let AdapterStep::Ready { changed, .. } = prepare(&again, &jobs) else {
        panic!("still accepted");
    };
    assert!(!changed);
}

#[test]
fn refusals_name_their_reason() {
    let unfinished = tuning("draft", "draft-out", false);
    let cases = [
        (vec!["missing"], Reason::AdapterJobNotFound),
        (vec!["draft"], Reason::AdapterJobNotSucceeded),
    ];
    let jobs = store(&[unfinished]);
    for (names, reason) in cases {
        match prepare(&served(&names), &jobs) {
            AdapterStep::Refused {
                reason: got,
                message,
            } => {
                assert_eq!(got, reason, "{names:?}: {message}");
                assert!(message.contains(names[0]), "{message}");
            }
            _ => panic!("{names:?} is refused"),
        }
    }
}

#[test]
fn a_pod_volume_of_an_adapters_name_is_refused() {
    let mut job = served(&["sql"]);
    job.spec
        .pod
        .get_or_insert_default()
        .volumes
        .push(serde_json::from_str(r#"{"name": "vramfit-adapter-x", "emptyDir": {}}"#).unwrap());
    let jobs = store(&[tuning("sql", "sql-out", true)]);
    assert!(matches!(
        prepare(&job, &jobs),
        AdapterStep::Refused {
            reason: Reason::AdapterVolumeNameTaken,
            ..
        }
    ));
}

#[test]
fn a_hold_keeps_the_replicas_and_the_list_last_accepted() {
    let jobs = store(&[tuning("sql", "sql-out", true)]);
    let AdapterStep::Ready { filled, .. } = prepare(&served(&["sql"]), &jobs) else {
        panic!("accepted");
    };
    let mut status = filled.status.clone().unwrap();
    status.phase = Some(Phase::Running);
    status.ready = Some("1/1".into());
    let mut job = served(&["sql", "missing"]);
    job.status = Some(status.clone());
    let held = hold(
        &job,
        Reason::AdapterJobNotFound,
        "adapter missing: …".into(),
        &now(),
    );
    assert_eq!(held.phase, Some(Phase::Running));
    assert_eq!(held.ready.as_deref(), Some("1/1"));
    assert_eq!(held.adapters, status.adapters);
    let condition = conditions::get(&held.conditions, ConditionType::AdaptersReady).unwrap();
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("False", "AdapterJobNotFound")
    );
}

#[test]
fn record_sets_the_condition_and_clears_it_once_no_adapter_is_named() {
    let jobs = store(&[tuning("sql", "sql-out", true)]);
    let AdapterStep::Ready { filled, .. } = prepare(&served(&["sql"]), &jobs) else {
        panic!("accepted");
    };
    let mut status = vramfit_api::InferenceJobStatus::default();
    record(&mut status, &filled, &now());
    let condition = conditions::get(&status.conditions, ConditionType::AdaptersReady).unwrap();
    assert_eq!(condition.status, "True");
    assert!(
        condition.message.contains("sql (rank 16, tuningJob/sql)"),
        "{}",
        condition.message
    );
    assert_eq!(status.adapters.len(), 1);

    record(&mut status, &served(&[]), &now());
    assert!(status.adapters.is_empty());
    assert!(conditions::get(&status.conditions, ConditionType::AdaptersReady).is_none());
}
