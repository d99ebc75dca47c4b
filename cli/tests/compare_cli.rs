//! `vramfit compare` from the command line: --dry-run needs no cluster, bad input is one line
//! on stderr with exit code 2.
// Test and benchmark code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
mod common;

use std::process::Output;

use common::vramfit;
use serde::Deserialize;
use vramfit_api::InferenceJob;

fn assert_clean_error(out: &Output, expected: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.starts_with("vramfit: error: "), "{stderr}");
    assert!(
        stderr.contains(expected),
        "expected {expected:?} in {stderr}"
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(out.stdout.is_empty());
}

const EXAMPLE: &str = "examples/internvl3-transformers.yaml";

#[test]
fn dry_run_prints_the_jobs_without_a_cluster() {
    let out = vramfit(&[
        "compare",
        EXAMPLE,
        "--classes",
        "a10g-x4,h100-80gb-x8",
        "--dry-run",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
    for name in [
        "internvl3-captions-a10g-x4-baseline-1",
        "internvl3-captions-a10g-x4-optimized-1",
        "internvl3-captions-h100-80gb-x8-baseline-1",
        "internvl3-captions-h100-80gb-x8-optimized-1",
    ] {
        assert!(table.contains(name), "{name} in {table}");
    }
    assert!(table.contains("expandable_segments:False"), "{table}");
}

#[test]
fn dry_run_yaml_is_the_manifests_to_apply() {
    let out = vramfit(&[
        "compare",
        EXAMPLE,
        "--classes",
        "a10g-x1,t4-x1",
        "--dry-run",
        "-o",
        "yaml",
        "--repeat",
        "2",
        "--name",
        "Caption Run",
        "-n",
        "team-a",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let jobs: Vec<InferenceJob> = serde_yaml::Deserializer::from_str(&text)
        .map(|d| InferenceJob::deserialize(d).unwrap())
        .collect();
    assert_eq!(jobs.len(), 8, "2 classes × 2 phases × 2 runs");
    for job in &jobs {
        let labels = job.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["vramfit.io/comparison"], "caption-run");
        assert_eq!(job.metadata.namespace.as_deref(), Some("team-a"));
        let class = &labels["vramfit.io/comparison-class"];
        let allowed = &job.spec.node_classes.as_ref().unwrap().allowed;
        assert_eq!(allowed, &vec![class.clone()], "pinned to its class");
        assert_eq!(
            job.spec.args,
            [
                "--input",
                "/data/images",
                "--output",
                "/data/captions.jsonl"
            ]
        );
        assert_eq!(
            (job.spec.context_length, job.spec.batch_size),
            (Some(4096), 1)
        );
    }
}

#[test]
fn bad_input_is_one_line() {
    assert_clean_error(&vramfit(&["compare", EXAMPLE, "--dry-run"]), "--classes");
    assert_clean_error(
        &vramfit(&["compare", "--dry-run", "--classes", "t4-x1"]),
        "manifest",
    );
    assert_clean_error(
        &vramfit(&[
            "compare",
            EXAMPLE,
            "--classes",
            "t4-x1",
            "--dry-run",
            "--price",
            "t4-x1=cheap",
        ]),
        "CLASS=DOLLARS",
    );
    assert_clean_error(
        &vramfit(&[
            "compare",
            EXAMPLE,
            "--classes",
            "t4-x1",
            "--dry-run",
            "--price",
            "a10g-x1=0.6",
        ]),
        "does not compare",
    );
    assert_clean_error(
        &vramfit(&["compare", EXAMPLE, "--classes", "t4-x1,t4-x1", "--dry-run"]),
        "twice",
    );
    assert_clean_error(&vramfit(&["compare", "--delete"]), "needs a name");
    // Against a cluster that is not there: one line that says so.
    assert_clean_error(
        &vramfit(&["compare", EXAMPLE, "--classes", "t4-x1"]),
        "no cluster",
    );
}

/// A served job never ends: compare, which runs each job to its end, refuses it.
#[test]
fn a_served_job_is_refused() {
    let out = vramfit(&[
        "compare",
        "examples/mistral-vllm.yaml",
        "--classes",
        "a10g-x4",
        "--dry-run",
    ]);
    assert_clean_error(&out, "this job is served (spec.serve)");
}
