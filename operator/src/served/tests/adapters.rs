//! `serve.adapters` through the real `reconcile` against the mock API server: a job naming a
//! fine-tuning job that does not exist writes its status and one event and creates nothing; a
//! job naming a succeeded LoRA run gets its event, then pods that mount the run's output volume
//! read-only with vLLM's LoRA flags, then its Service and its status with the adapter.
use std::time::Duration;

use kube::runtime::controller::Action;
use serde_json::{Value, json};
use vramfit_api::InferenceJob;
use vramfit_api::adapters::{AdapterSpec, TuningJobRef};

use super::api::{cluster, served_job, services};
use crate::batch::tests::run;
use crate::fixtures;
use crate::verifier::test_context_with_serving;

fn naming(job: &mut InferenceJob, tuning: &str) {
    job.spec.serve.get_or_insert_default().adapters = vec![AdapterSpec {
        name: "sql".into(),
        tuning_job: TuningJobRef {
            name: tuning.into(),
        },
    }];
}

/// A LoRA run of the served model (Mistral-7B) that succeeded and reported its adapter.
fn trained(name: &str) -> InferenceJob {
    let spec = fixtures::spec_from_json(
        r#"{"model": {"preset": "mistral-7b-instruct-v0.3"}, "runtime": "transformers",
            "image": "trainer:1", "tuning": {"method": "lora", "outputVolume": "out"},
            "pod": {"volumes": [{"name": "out", "persistentVolumeClaim": {"claimName": "sql-out"}}]}}"#,
    );
    let mut job = fixtures::job(name, spec);
    job.status = Some(
        serde_json::from_value(json!({
            "phase": "Succeeded",
            "result": {"items": 1, "seconds": 1.0, "itemsPerHour": 3600.0, "adapter": {
                "files": ["adapter_config.json", "adapter_model.safetensors"], "rank": 16,
                "alpha": 32.0, "targetModules": ["q_proj", "v_proj"],
                "baseModel": "mistralai/Mistral-7B-Instruct-v0.3", "bytes": 13631488}},
        }))
        .unwrap(),
    );
    job
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

#[tokio::test]
async fn a_job_naming_a_missing_tuning_job_writes_why_and_creates_nothing() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving);
    let mut job = served_job(1);
    naming(&mut job, "missing");
    let mut written = Value::Null;
    let action = run(&ctx, &job, &mut api, async |api| {
        written = api.status_apply(&job).await;
        api.events("chat", &["AdapterRefused"]).await;
    })
    .await;
    assert_eq!(action, Action::requeue(Duration::from_secs(20)));
    let held = condition(&written, "AdaptersReady");
    assert_eq!(
        (&held["status"], &held["reason"]),
        (&json!("False"), &json!("AdapterJobNotFound"))
    );
    assert!(
        held["message"].as_str().unwrap().contains("missing"),
        "{held}"
    );
    assert_eq!(written["status"]["phase"], "Pending");
}

#[tokio::test]
async fn an_accepted_adapter_is_mounted_and_flagged_in_every_replica() {
    let (ctx, mut api, mut writers, mut serving) = test_context_with_serving();
    cluster(&mut writers, &mut serving);
    writers.apply_job(&trained("sql-lora"));
    let mut job = served_job(1);
    naming(&mut job, "sql-lora");
    let (mut pod, mut status) = (Value::Null, Value::Null);
    run(&ctx, &job, &mut api, async |api| {
        api.events("chat", &["AdaptersAccepted"]).await;
        pod = api.pod_create("chat-r0-1").await;
        // One replica: a Service, and no budget (no replica may go).
        api.object_create(&services(), "chat").await;
        status = api.status_apply(&job).await;
        api.events("chat", &["PodCreated"]).await;
    })
    .await;
    let volume = pod["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "vramfit-adapter-sql")
        .expect("the run's output volume");
    assert_eq!(volume["persistentVolumeClaim"]["claimName"], "sql-out");
    let container = &pod["spec"]["containers"][0];
    let mount = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "vramfit-adapter-sql")
        .expect("mounted");
    assert_eq!(
        (&mount["mountPath"], &mount["readOnly"]),
        (&json!("/vramfit/adapters/sql"), &json!(true))
    );
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let flag = |name: &str| args.iter().position(|a| *a == name).map(|i| args[i + 1]);
    assert!(args.contains(&"--enable-lora"), "{args:?}");
    assert_eq!(flag("--lora-modules"), Some("sql=/vramfit/adapters/sql"));
    assert_eq!(flag("--max-lora-rank"), Some("16"));
    assert_eq!(pod["metadata"]["annotations"]["vramfit.io/adapters"], "sql");
    assert_eq!(pod["metadata"]["labels"]["adapter.vramfit.io/sql"], "true");

    let ready = condition(&status, "AdaptersReady");
    assert_eq!(
        (&ready["status"], &ready["reason"]),
        (&json!("True"), &json!("AdaptersAccepted"))
    );
    assert_eq!(
        status["status"]["adapters"][0]["source"],
        "tuningJob/sql-lora"
    );
    assert_eq!(
        status["status"]["replicaStatuses"][0]["adapters"],
        json!(["sql"])
    );
    assert!(
        status["status"]["plan"]["adapters"]["memoryMib"]
            .as_u64()
            .unwrap()
            > 0
    );
}
