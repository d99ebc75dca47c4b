//! Planner throughput: every preset × every built-in class × every runtime that fits it.
//! Run: `cargo bench -p vramfit-planner --bench plan_catalog`.
// Test and benchmark code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use vramfit_api::{Fallback, InferenceJobSpec, Runtime};
use vramfit_planner::{builtin_classes, model_catalog::PRESETS, plan_for_class, resolve_job};

fn jobs() -> Vec<vramfit_planner::JobInput> {
    PRESETS
        .iter()
        .map(|p| {
            let runtime = if p.shape.gguf_file_bytes.is_some() {
                Runtime::Llamacpp
            } else {
                Runtime::Vllm
            };
            let yaml = format!(
                "{{model: {{preset: {}}}, runtime: {}, image: x}}",
                p.key,
                serde_yaml::to_string(&runtime).unwrap().trim()
            );
            let spec: InferenceJobSpec = serde_yaml::from_str(&yaml).unwrap();
            resolve_job(&spec).unwrap()
        })
        .collect()
}

fn plan_catalog(c: &mut Criterion) {
    let jobs = jobs();
    let classes = builtin_classes();
    let fallback = Fallback::default();
    let plans = (jobs.len() * classes.len()) as u64;
    // The figure the README quotes with the time: what one pass plans.
    println!(
        "planner: {} presets × {} built-in classes = {plans} plans per pass",
        jobs.len(),
        classes.len()
    );
    let mut group = c.benchmark_group("planner");
    group.throughput(criterion::Throughput::Elements(plans));
    group.bench_function("every_preset_x_every_builtin_class", |b| {
        b.iter(|| {
            for job in &jobs {
                for class in &classes {
                    let _ = black_box(plan_for_class(black_box(job), black_box(class), &fallback));
                }
            }
        })
    });
    group.finish();
}

criterion_group!(benches, plan_catalog);
criterion_main!(benches);
