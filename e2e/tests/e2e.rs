//! vramfit end-to-end suite: the real `vramfit-agent` and `vramfit-operator` binaries
//! against the cluster in `KUBECONFIG`, with simulated GPU nodes and a simulated kubelet.
//!
//! Without `KUBECONFIG` it prints that it did not run and why, and exits 0 (it reports no
//! pass). With one it prints `PASS`/`FAIL` per scenario and `N passed, M failed`, and exits
//! non-zero on any failure. Everything it creates is removed at the end, failure or not
//! (`VRAMFIT_E2E_KEEP=1` keeps it for debugging). See `e2e/README.md`.
//!
//! This file registers the scenarios, in the order they run; each lives in
//! `tests/scenarios/<area>.rs`, and the harness they share (set-up, cleanup, helpers) in the
//! `vramfit-e2e` library (`e2e/src/`).
//!
//! `cargo test --workspace --locked --test e2e -- --nocapture [scenario-substring…]`
use std::panic::AssertUnwindSafe;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use futures::FutureExt as _;
use vramfit_e2e::{CleanupGuard, CleanupPlan, Skipped, Suite, skip_reason};

#[path = "scenarios/agent_labels.rs"]
mod agent_labels;
#[path = "scenarios/autoscaling.rs"]
mod autoscaling;
#[path = "scenarios/compare.rs"]
mod compare;
#[path = "scenarios/containment.rs"]
mod containment;
#[path = "scenarios/dashboards.rs"]
mod dashboards;
#[path = "scenarios/faults.rs"]
mod faults;
#[path = "scenarios/garbage_collection.rs"]
mod garbage_collection;
#[path = "scenarios/group_leader_success.rs"]
mod group_leader_success;
#[path = "scenarios/group_never_half.rs"]
mod group_never_half;
#[path = "scenarios/group_oom.rs"]
mod group_oom;
#[path = "scenarios/group_operator_restart.rs"]
mod group_operator_restart;
#[path = "scenarios/group_placed_whole.rs"]
mod group_placed_whole;
#[path = "scenarios/group_worker_failure.rs"]
mod group_worker_failure;
#[path = "scenarios/hub_models.rs"]
mod hub_models;
#[path = "scenarios/inference_pool.rs"]
mod inference_pool;
#[path = "scenarios/invalid_manifests.rs"]
mod invalid_manifests;
#[path = "scenarios/kubectl_columns.rs"]
mod kubectl_columns;
#[path = "scenarios/leader_election.rs"]
mod leader_election;
#[path = "scenarios/model_cache_placement.rs"]
mod model_cache_placement;
#[path = "scenarios/namespace_scope.rs"]
mod namespace_scope;
#[path = "scenarios/oom_retries.rs"]
mod oom_retries;
#[path = "scenarios/operator_endpoints.rs"]
mod operator_endpoints;
#[path = "scenarios/operator_restart.rs"]
mod operator_restart;
#[path = "scenarios/partitions.rs"]
mod partitions;
#[path = "scenarios/planning_and_pods.rs"]
mod planning_and_pods;
#[path = "scenarios/pod_security.rs"]
mod pod_security;
#[path = "scenarios/rbac.rs"]
mod rbac;
#[path = "scenarios/real_node.rs"]
mod real_node;
#[path = "scenarios/real_node_adapters.rs"]
mod real_node_adapters;
#[path = "scenarios/real_node_autoscaling.rs"]
mod real_node_autoscaling;
#[path = "scenarios/real_node_group.rs"]
mod real_node_group;
#[path = "scenarios/real_node_model_cache.rs"]
mod real_node_model_cache;
#[path = "scenarios/real_node_model_cache_eviction.rs"]
mod real_node_model_cache_eviction;
#[path = "scenarios/real_node_model_cache_links.rs"]
mod real_node_model_cache_links;
#[path = "scenarios/real_node_model_cache_read_only.rs"]
mod real_node_model_cache_read_only;
#[path = "scenarios/real_node_serving.rs"]
mod real_node_serving;
#[path = "scenarios/scheduling.rs"]
mod scheduling;
#[path = "scenarios/served_adapters.rs"]
mod served_adapters;
#[path = "scenarios/serving.rs"]
mod serving;
#[path = "scenarios/serving_groups.rs"]
mod serving_groups;
#[path = "scenarios/serving_owned.rs"]
mod serving_owned;
#[path = "scenarios/status_and_events.rs"]
mod status_and_events;
#[path = "scenarios/tuning.rs"]
mod tuning;
#[path = "scenarios/workload_reports.rs"]
mod workload_reports;

// ---------------------------------------------------------------------------------------
// Entry point
// ---------------------------------------------------------------------------------------

fn main() -> ExitCode {
    if let Some(reason) = skip_reason() {
        eprintln!("{reason}");
        println!("e2e: skipped (KUBECONFIG not set)");
        return ExitCode::SUCCESS;
    }
    // libtest flags (`--nocapture`, `--test-threads 1`) are accepted and ignored; other
    // arguments select scenarios by substring.
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-') && a.parse::<u64>().is_err())
        .collect();
    let plan = Arc::new(Mutex::new(CleanupPlan::default()));
    let guard = CleanupGuard(plan.clone());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let (passed, failed, skipped) = runtime.block_on(run(plan, filters));
    drop(runtime);
    drop(guard);
    println!("{passed} passed, {failed} failed, {skipped} skipped");
    if failed == 0 && passed > 0 {
        ExitCode::SUCCESS
    } else {
        if passed == 0 && failed == 0 {
            eprintln!("e2e: no scenario ran (check the filter arguments)");
        }
        ExitCode::FAILURE
    }
}

type Scenario = for<'a> fn(&'a mut Suite) -> futures::future::BoxFuture<'a, Result<()>>;

async fn run(plan: Arc<Mutex<CleanupPlan>>, filters: Vec<String>) -> (u32, u32, u32) {
    let scenarios: Vec<(&str, Scenario)> = vec![
        ("agent-labels-nodes", |s| {
            Box::pin(agent_labels::agent_labels_nodes(s))
        }),
        ("operator-serves-readyz-and-metrics", |s| {
            Box::pin(operator_endpoints::operator_serves(s))
        }),
        ("examples-are-planned", |s| {
            Box::pin(planning_and_pods::examples_are_planned(s))
        }),
        ("kubectl-printer-columns", |s| {
            Box::pin(kubectl_columns::kubectl_columns(s))
        }),
        ("kubelet-success", |s| {
            Box::pin(status_and_events::kubelet_success(s))
        }),
        ("oom-steps-down-then-fails", |s| {
            Box::pin(oom_retries::oom_steps_down(s))
        }),
        ("operator-restart-keeps-one-pod-per-job", |s| {
            Box::pin(operator_restart::restart_keeps_one_pod(s))
        }),
        // After the examples' jobs are deleted: it needs a free GPU on a10g-x4, where the
        // served examples' replicas may go.
        ("full-class-overflows-then-frees", |s| {
            Box::pin(scheduling::full_class_overflows_then_frees(s))
        }),
        // After the examples' jobs are deleted: it needs every GPU of a10g-x4 free, and a
        // served example's replica may overflow there.
        ("unschedulable-pod-frees-its-class", |s| {
            Box::pin(scheduling::unschedulable_pod_frees_its_class(s))
        }),
        ("leader-election-single-writer", |s| {
            Box::pin(leader_election::leader_election(s))
        }),
        ("invalid-manifests-are-rejected", |s| {
            Box::pin(invalid_manifests::invalid_manifests(s))
        }),
        ("deleted-job-pods-are-collectable", |s| {
            Box::pin(garbage_collection::garbage_collection(s))
        }),
        ("panicking-reconcile-is-contained", |s| {
            Box::pin(containment::a_panicking_reconcile_is_contained(s))
        }),
        ("ended-controller-ends-the-process", |s| {
            Box::pin(containment::an_ended_controller_ends_the_process(s))
        }),
        ("operator-sigkill-during-burst", |s| {
            Box::pin(faults::sigkill_during_burst(s))
        }),
        ("api-server-outage", |s| {
            Box::pin(faults::api_server_outage(s))
        }),
        ("leader-fences-itself-in-an-outage", |s| {
            Box::pin(faults::leader_fences_itself_in_an_outage(s))
        }),
        ("workload-reports-garbage-then-result", |s| {
            Box::pin(workload_reports::garbage_then_result(s))
        }),
        ("tuning-plans-per-class-and-steps-down", |s| {
            Box::pin(tuning::tuning_jobs(s))
        }),
        ("served-adapters-refused-then-served", |s| {
            Box::pin(served_adapters::refusals_then_served(s))
        }),
        ("compare-classes", |s| Box::pin(compare::compare_classes(s))),
        ("hub-model-is-resolved", |s| {
            Box::pin(hub_models::hub_model_is_resolved(s))
        }),
        // With an operator of its own (`--model-cache`); the scenario plays the nodes' agents.
        ("model-cache-placement", |s| {
            Box::pin(model_cache_placement::cached_node_preferred(s))
        }),
        ("mixed-and-mig-nodes", |s| {
            Box::pin(partitions::mixed_and_mig_nodes(s))
        }),
        ("restricted-namespace", |s| {
            Box::pin(pod_security::restricted_namespace(s))
        }),
        ("operator-under-chart-rbac", |s| {
            Box::pin(rbac::operator_under_chart_rbac(s))
        }),
        ("namespace-scoped-install", |s| {
            Box::pin(namespace_scope::namespace_scoped_install(s))
        }),
        ("served-service-and-endpoints", |s| {
            Box::pin(serving::service_and_endpoints(s))
        }),
        ("served-kubectl-scale-over-two-classes", |s| {
            Box::pin(serving::kubectl_scale_over_two_classes(s))
        }),
        ("served-oom-steps-down-behind-the-endpoint", |s| {
            Box::pin(serving::oom_steps_down_behind_the_endpoint(s))
        }),
        ("served-rolling-update-keeps-an-endpoint", |s| {
            Box::pin(serving::rolling_update_keeps_an_endpoint(s))
        }),
        ("served-admission-refusal-backs-off", |s| {
            Box::pin(serving::admission_refusal_backs_off(s))
        }),
        ("served-crash-loop-backs-off", |s| {
            Box::pin(serving::crash_loop_backs_off(s))
        }),
        ("served-hpa-targets-the-scale-subresource", |s| {
            Box::pin(serving::hpa_targets_the_scale_subresource(s))
        }),
        ("served-autoscaling-weighs-each-replica-by-its-class", |s| {
            Box::pin(autoscaling::weighs_each_replica_by_its_class(s))
        }),
        ("served-inference-pool-selects-the-serving-pods", |s| {
            Box::pin(inference_pool::selects_exactly_the_serving_pods(s))
        }),
        ("served-unschedulable-replica-frees-its-class", |s| {
            Box::pin(serving::unschedulable_replica_frees_its_class(s))
        }),
        ("served-foreign-service-and-budget-left-alone", |s| {
            Box::pin(serving_owned::foreign_objects_are_left_alone(s))
        }),
        ("served-drain-evicts-while-a-replica-waits-for-room", |s| {
            Box::pin(serving_owned::drain_evicts_a_replica_while_another_waits_for_room(s))
        }),
        ("served-group-service-has-only-leaders", |s| {
            Box::pin(serving_groups::served_group_service_has_only_leaders(s))
        }),
        // After the simulated scenarios: it checks the dashboards against what their operator did.
        ("dashboards-show-data", |s| {
            Box::pin(dashboards::dashboards_show_data(s))
        }),
        // Groups on nodes of their own, added and removed by each scenario; after the
        // dashboards (one restarts the operator), before the real node.
        ("group-placed-whole", |s| {
            Box::pin(group_placed_whole::placed_whole(s))
        }),
        ("group-never-half", |s| {
            Box::pin(group_never_half::never_half(s))
        }),
        ("group-worker-failure-replaces-group", |s| {
            Box::pin(group_worker_failure::worker_failure_replaces_group(s))
        }),
        ("group-oom-steps-down", |s| {
            Box::pin(group_oom::oom_steps_down(s))
        }),
        ("group-leader-success-ends-the-job", |s| {
            Box::pin(group_leader_success::leader_success_ends_the_job(s))
        }),
        ("group-operator-restart-writes-nothing", |s| {
            Box::pin(group_operator_restart::restart_writes_nothing(s))
        }),
        // Last: they label a real node, which the simulated scenarios above must not see.
        ("real-node-runs-a-job", |s| {
            Box::pin(real_node::runs_a_job(s))
        }),
        ("real-node-garbage-then-float16", |s| {
            Box::pin(real_node::garbage_then_float16(s))
        }),
        ("real-node-oom-steps-down", |s| {
            Box::pin(real_node::oom_steps_down(s))
        }),
        ("real-node-restricted-namespace", |s| {
            Box::pin(real_node::restricted_namespace(s))
        }),
        ("real-node-image-pull-fails", |s| {
            Box::pin(real_node::image_pull_fails(s))
        }),
        ("real-node-served-llama-server", |s| {
            Box::pin(real_node_serving::served_llama_server(s))
        }),
        ("real-node-served-llama-server-follows-its-load", |s| {
            Box::pin(real_node_autoscaling::follows_its_load(s))
        }),
        ("real-node-served-lora-adapters-from-tuning-jobs", |s| {
            Box::pin(real_node_adapters::tuned_then_served(s))
        }),
        ("real-node-served-host-out-of-memory", |s| {
            Box::pin(real_node_serving::served_host_out_of_memory(s))
        }),
        // With an operator of its own (`--group-spread none`): the group's ranks share the node.
        ("real-node-served-llama-group", |s| {
            Box::pin(real_node_group::served_llama_group(s))
        }),
        ("real-node-model-cache-cold-then-warm", |s| {
            Box::pin(real_node_model_cache::cold_then_warm(s))
        }),
        ("real-node-model-cache-evicts-lru", |s| {
            Box::pin(real_node_model_cache_eviction::evicts_the_least_recently_used(s))
        }),
        ("real-node-model-cache-private-stays-in-namespace", |s| {
            Box::pin(real_node_model_cache_eviction::private_model_stays_in_its_namespace(s))
        }),
        ("real-node-model-cache-tenant-cannot-write", |s| {
            Box::pin(real_node_model_cache_read_only::tenant_cannot_change_a_cached_model(s))
        }),
        ("real-node-model-cache-link-not-followed", |s| {
            Box::pin(real_node_model_cache_links::planted_link_is_not_followed(s))
        }),
    ];
    let setup_result = AssertUnwindSafe(Suite::setup(plan)).catch_unwind().await;
    let mut suite = match setup_result {
        Ok(Ok(suite)) => suite,
        Ok(Err(e)) => {
            println!("FAIL setup: {e:#}");
            return (0, 1, 0);
        }
        Err(_) => {
            println!("FAIL setup: panicked");
            return (0, 1, 0);
        }
    };
    println!(
        "e2e: run {} in namespace {} (operator logs under {})",
        suite.run,
        suite.ns,
        suite.logs.display()
    );
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for (name, scenario) in scenarios {
        // The agent's labels are what every other scenario places on: it always runs.
        let prerequisite = name == "agent-labels-nodes";
        if !prerequisite
            && !filters.is_empty()
            && !filters.iter().any(|f| name.contains(f.as_str()))
        {
            continue;
        }
        println!("---- {name}");
        let outcome = AssertUnwindSafe(scenario(&mut suite)).catch_unwind().await;
        match outcome {
            Ok(Ok(())) => {
                passed += 1;
                println!("PASS {name}");
            }
            Ok(Err(e)) if e.downcast_ref::<Skipped>().is_some() => {
                skipped += 1;
                println!("SKIP {name}: {e}");
            }
            Ok(Err(e)) => {
                failed += 1;
                println!("FAIL {name}: {e:#}");
                for op in &suite.operators {
                    println!("     operator {} log: {}", op.name, op.log.display());
                }
            }
            Err(panic) => {
                failed += 1;
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                println!("FAIL {name}: panicked: {msg}");
            }
        }
    }
    drop(suite);
    (passed, failed, skipped)
}
