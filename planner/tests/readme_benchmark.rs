//! The README's planner benchmark quotes the plan count the bench prints (every preset × every
//! built-in class): when the catalog grows, the figure must be measured again.
use vramfit_planner::{builtin_classes, model_catalog::PRESETS};

#[test]
fn the_readme_benchmark_counts_the_plans_the_bench_runs() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md");
    let row = readme
        .lines()
        .find(|l| l.starts_with("| planner, every preset × every built-in class"))
        .expect("the README's planner benchmark row");
    let (presets, classes) = (PRESETS.len(), builtin_classes().len());
    let quoted = format!(
        "({} plans: {presets} presets × {classes} classes",
        presets * classes
    );
    assert!(
        row.contains(&quoted),
        "the README's planner benchmark is for another catalog: run `cargo bench -p vramfit-planner --bench plan_catalog` and quote its figures with {quoted:?}:\n{row}"
    );
}
