//! `vramfit compare`: one job on several node classes, a baseline phase (the same generic
//! settings everywhere) and an optimized phase (each class's own plan), reported per item
//! (docs/compare.md).
//!
//! * [`baseline`]: the generic settings and each class's two specs (pure).
//! * [`jobs`]: the InferenceJobs, their names and labels (pure).
//! * [`cluster`]: creating, finding and deleting them.
//! * [`follow`]: following them to their end.
//! * [`report`]: the figures (pure); [`svg`]: the chart (pure).
pub mod baseline;
pub mod cluster;
pub mod follow;
pub mod jobs;
pub mod report;
pub mod svg;
pub mod unit;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use kube::{Api, Client};
use vramfit_api::InferenceJob;
use vramfit_planner::{NodeClass, resolve_job};

use crate::args::{CompareArgs, Format};
use crate::error::CliError;
use crate::manifest;
use baseline::{Derivation, Offline};
use follow::{FollowEnd, FollowOptions};
use jobs::PlannedJob;
use report::{ClassContext, Report, ReportContext, RunOutcome};

/// What the caller asks for, besides the job.
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// Classes to compare, in report order.
    pub classes: Vec<String>,
    /// Comparison id; the job's name when unset.
    pub name: Option<String>,
    /// Namespace; the job's when unset, then the caller's default.
    pub namespace: Option<String>,
    /// Runs per class and phase (at least 1).
    pub repeat: u32,
    /// Dollars per GPU-hour by class, over the plans' prices.
    pub prices: BTreeMap<String, f64>,
}

/// A comparison ready to start: its id, namespace, baseline and jobs.
#[derive(Clone, Debug)]
pub struct Comparison {
    /// The id on every job's `vramfit.io/comparison` label.
    pub id: String,
    /// Namespace of the jobs.
    pub namespace: String,
    /// The baseline and every class's setup.
    pub derivation: Derivation,
    /// The jobs to create.
    pub jobs: Vec<PlannedJob>,
    /// What the report needs besides the runs.
    pub context: ReportContext,
}

/// Prepares the comparison of `job` (pure): `known` are the classes to plan with offline,
/// `default_namespace` the namespace when neither the request nor the job names one.
pub fn prepare(
    job: &InferenceJob,
    known: &[NodeClass],
    request: &Request,
    default_namespace: &str,
) -> Result<Comparison, String> {
    let id = jobs::comparison_id(request.name.as_deref(), job.metadata.name.as_deref())?;
    if job.spec.serve.is_some() {
        // A comparison runs each job to its end and reads the workload's result; a server
        // never ends.
        return Err(
            "compare runs a batch job to its end on each class; this job is served (spec.serve): compare a batch copy of it without serve"
                .to_string(),
        );
    }
    if let Some(class) = request.prices.keys().find(|c| !request.classes.contains(c)) {
        return Err(format!(
            "--price names {class}, which --classes does not compare"
        ));
    }
    let namespace = request
        .namespace
        .clone()
        .or_else(|| job.metadata.namespace.clone())
        .unwrap_or_else(|| default_namespace.to_string());
    let derivation = baseline::derive(&job.spec, known, &request.classes)?;
    let input = resolve_job(&job.spec).map_err(|why| why.to_string())?;
    let repeat = request.repeat.max(1);
    let jobs = jobs::planned_jobs(&id, &namespace, job, &derivation, repeat);
    let context = ReportContext {
        comparison: id.clone(),
        namespace: namespace.clone(),
        job: format!(
            "{}/{}",
            job.metadata.namespace.as_deref().unwrap_or(&namespace),
            job.metadata.name.as_deref().unwrap_or("<unnamed>")
        ),
        model: input.model.name.clone(),
        runtime: plain(&input.runtime),
        baseline: derivation.settings.clone(),
        classes: derivation
            .classes
            .iter()
            .map(|c| ClassContext {
                name: c.class.clone(),
                baseline_skipped: c.baseline_skipped(),
                optimized_skipped: c.optimized_skipped(),
            })
            .collect(),
        repeat,
        prices: request.prices.clone(),
        unit: report::Unit::of(&input),
    };
    Ok(Comparison {
        id,
        namespace,
        derivation,
        jobs,
        context,
    })
}

impl Comparison {
    /// Every run and its job's name.
    pub fn runs(&self) -> Vec<(jobs::RunKey, String)> {
        self.jobs
            .iter()
            .map(|j| (j.key.clone(), j.name()))
            .collect()
    }

    /// The report of `outcomes` (pure).
    pub fn report(&self, outcomes: &[RunOutcome]) -> Report {
        report::build(&self.context, outcomes)
    }
}

/// What a comparison run against a cluster gives.
#[derive(Clone, Debug)]
pub struct Finished {
    /// What was created and what was re-attached to.
    pub started: cluster::Started,
    /// How following ended.
    pub end: FollowEnd,
    /// The report (partial unless `end` is Done).
    pub report: Report,
}

/// Starts (or re-attaches to) `comparison` on the cluster, follows its jobs until they end,
/// `options.timeout` passes or `stop` completes, and reports. The library entry point: the
/// command is this plus printing; an e2e test calls it with its own client and a `stop` that
/// never completes.
pub async fn run(
    client: Client,
    comparison: &Comparison,
    options: FollowOptions,
    stop: impl Future<Output = ()>,
) -> Result<Finished, CliError> {
    let api: Api<InferenceJob> = Api::namespaced(client, &comparison.namespace);
    let started = cluster::start(&api, &comparison.id, &comparison.jobs).await?;
    if options.progress {
        announce(comparison, &started);
    }
    let known: Vec<String> = comparison
        .derivation
        .classes
        .iter()
        .filter(|c| c.optimized != Offline::UnknownClass)
        .map(|c| c.class.clone())
        .collect();
    let (outcomes, end) = follow::follow(
        &api,
        &comparison.id,
        &comparison.runs(),
        &known,
        options,
        stop,
    )
    .await?;
    Ok(Finished {
        started,
        end,
        report: comparison.report(&outcomes),
    })
}

/// Deletes the jobs of comparison `id` in `namespace`; their names.
pub async fn delete(client: Client, namespace: &str, id: &str) -> Result<Vec<String>, CliError> {
    cluster::delete(&Api::namespaced(client, namespace), id).await
}

fn announce(comparison: &Comparison, started: &cluster::Started) {
    if !started.reattached.is_empty() {
        eprintln!(
            "Re-attached to comparison {} in {}: {} job(s) already there, left as they are{}",
            comparison.id,
            comparison.namespace,
            started.reattached.len(),
            if started.created.is_empty() {
                String::new()
            } else {
                format!("; created the {} missing", started.created.len())
            }
        );
    } else {
        eprintln!(
            "Comparison {} in {}: created {} job(s)",
            comparison.id,
            comparison.namespace,
            started.created.len()
        );
    }
    if !started.strays.is_empty() {
        eprintln!(
            "Not followed (other classes or repeats of the same comparison): {}",
            started.strays.join(", ")
        );
    }
    for setup in &comparison.derivation.classes {
        match (setup.optimized_skipped(), setup.baseline_skipped()) {
            (Some(why), _) => eprintln!("{}: not compared: {why}", setup.class),
            (None, Some(why)) => eprintln!("{}: optimized plan only: {why}", setup.class),
            (None, None) => {}
        }
    }
}

/// `vramfit compare`.
pub fn compare_command(args: &CompareArgs) -> Result<ExitCode, CliError> {
    let usage = CliError::Usage;
    if args.delete {
        return delete_command(args);
    }
    let file = args.file.as_ref().ok_or_else(|| {
        usage(
            "compare needs an InferenceJob manifest: vramfit compare JOB.yaml --classes a,b".into(),
        )
    })?;
    if args.classes.is_empty() {
        return Err(usage("compare needs --classes CLASS,CLASS,...".into()));
    }
    let job = manifest::read_job(file)?;
    let known = manifest::classes(args.node_classes.as_ref())?;
    let request = Request {
        classes: args.classes.iter().map(|c| c.trim().to_string()).collect(),
        name: args.name.clone(),
        namespace: args.namespace.clone(),
        repeat: args.repeat,
        prices: parse_prices(&args.prices)?,
    };
    let invalid = |message| CliError::InvalidSpec {
        path: file.clone(),
        message,
    };
    if args.dry_run {
        // No client: the namespace falls back to `default`, as kubectl's would without one.
        let comparison = prepare(&job, &known, &request, "default").map_err(invalid)?;
        print!("{}", dry_run_output(&comparison, args.output)?);
        if let Some(dir) = &args.output_dir {
            for path in write_dry_run(&comparison, dir)? {
                eprintln!("wrote {}", path.display());
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let runtime = tokio_runtime()?;
    runtime.block_on(async {
        let client = client().await?;
        let comparison =
            prepare(&job, &known, &request, client.default_namespace()).map_err(invalid)?;
        let options = FollowOptions {
            timeout: args.timeout,
            poll: args.poll,
            progress: true,
        };
        let stop = async {
            // No handler (an unusual platform): never stop early rather than at once.
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let finished = run(client, &comparison, options, stop).await?;
        let again = reattach_hint(args, &comparison);
        match finished.end {
            FollowEnd::Interrupted => {
                eprintln!(
                    "\nStopped following; the jobs keep running.\n  re-attach: {again}\n  clean up:  vramfit compare --delete --name {} -n {}",
                    comparison.id, comparison.namespace
                );
                return Ok(ExitCode::from(130));
            }
            FollowEnd::TimedOut => eprintln!(
                "\n--timeout passed; unfinished jobs keep running (re-attach: {again}; clean up: vramfit compare --delete --name {} -n {})",
                comparison.id, comparison.namespace
            ),
            FollowEnd::Done => {}
        }
        print!("{}", report_output(&finished.report, args.output)?);
        if let Some(dir) = &args.output_dir {
            for path in write_outputs(&finished.report, dir)? {
                eprintln!("wrote {}", path.display());
            }
        }
        Ok(if finished.end == FollowEnd::Done {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        })
    })
}

fn delete_command(args: &CompareArgs) -> Result<ExitCode, CliError> {
    let job = args
        .file
        .as_ref()
        .map(|f| manifest::read_job(f))
        .transpose()?;
    let id = jobs::comparison_id(
        args.name.as_deref(),
        job.as_ref().and_then(|j| j.metadata.name.as_deref()),
    )
    .map_err(CliError::Usage)?;
    let runtime = tokio_runtime()?;
    runtime.block_on(async {
        let client = client().await?;
        let namespace = args
            .namespace
            .clone()
            .or_else(|| job.as_ref().and_then(|j| j.metadata.namespace.clone()))
            .unwrap_or_else(|| client.default_namespace().to_string());
        let deleted = delete(client, &namespace, &id).await?;
        if deleted.is_empty() {
            println!("comparison {id} in {namespace}: no jobs to delete");
        }
        for name in deleted {
            println!("deleted InferenceJob {namespace}/{name}");
        }
        Ok(ExitCode::SUCCESS)
    })
}

fn reattach_hint(args: &CompareArgs, comparison: &Comparison) -> String {
    let mut hint = format!(
        "vramfit compare {} --classes {} --name {} -n {}",
        args.file
            .as_ref()
            .map_or("JOB.yaml".into(), |f| f.display().to_string()),
        comparison
            .context
            .classes
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join(","),
        comparison.id,
        comparison.namespace
    );
    if comparison.context.repeat > 1 {
        let _ = write!(hint, " --repeat {}", comparison.context.repeat);
    }
    hint
}

fn tokio_runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Kube(format!("cannot start the async runtime: {e}")))
}

async fn client() -> Result<Client, CliError> {
    Client::try_default().await.map_err(|e| {
        CliError::Kube(format!(
            "no cluster to compare on ({e}); set KUBECONFIG, or use --dry-run"
        ))
    })
}

/// `class=dollars` flags: dollars per GPU-hour by class.
pub fn parse_prices(flags: &[String]) -> Result<BTreeMap<String, f64>, CliError> {
    let mut prices = BTreeMap::new();
    for flag in flags {
        let bad = || {
            CliError::Usage(format!(
                "--price {flag:?}: expected CLASS=DOLLARS per GPU-hour, e.g. a10g-x1=0.60"
            ))
        };
        let (class, dollars) = flag.split_once('=').ok_or_else(bad)?;
        let dollars: f64 = dollars.trim().parse().map_err(|_| bad())?;
        if class.trim().is_empty() || !dollars.is_finite() || dollars < 0.0 {
            return Err(bad());
        }
        if prices.insert(class.trim().to_string(), dollars).is_some() {
            return Err(CliError::Usage(format!(
                "--price names {} twice",
                class.trim()
            )));
        }
    }
    Ok(prices)
}

/// What `--dry-run` prints: the jobs as manifests (yaml, json) or a table of their plans.
pub fn dry_run_output(comparison: &Comparison, format: Format) -> Result<String, CliError> {
    match format {
        Format::Yaml => {
            let mut out = String::new();
            for job in &comparison.jobs {
                out.push_str("---\n");
                out.push_str(
                    &serde_yaml::to_string(&job.job)
                        .map_err(|e| CliError::Serialize(e.to_string()))?,
                );
            }
            Ok(out)
        }
        Format::Json => {
            let list = serde_json::json!({
                "apiVersion": "v1",
                "kind": "List",
                "items": comparison.jobs.iter().map(|j| &j.job).collect::<Vec<_>>(),
            });
            serde_json::to_string_pretty(&list)
                .map(|s| s + "\n")
                .map_err(|e| CliError::Serialize(e.to_string()))
        }
        Format::Table => Ok(dry_run_table(comparison)),
    }
}

fn dry_run_table(comparison: &Comparison) -> String {
    let mut out = String::new();
    let ctx = &comparison.context;
    let _ = writeln!(
        out,
        "Comparison {} in {} (dry run: nothing created): InferenceJob {}, {} under {}",
        comparison.id, comparison.namespace, ctx.job, ctx.model, ctx.runtime
    );
    // What a llama.cpp server does not read is not part of its baseline either.
    let pytorch = comparison
        .jobs
        .first()
        .is_none_or(|j| vramfit_planner::workload::reads_pytorch_settings(j.job.spec.runtime));
    let _ = writeln!(
        out,
        "Baseline on every class: {}",
        report::baseline_words(&comparison.derivation.settings, pytorch)
    );
    for note in &comparison.derivation.notes {
        let _ = writeln!(out, "  - {note}");
    }
    out.push('\n');
    let mut rows = vec![
        [
            "JOB",
            "CLASS",
            "PHASE",
            "RUN",
            "GPUS",
            "DTYPE",
            "QUANT",
            "FLASH",
            "ALLOC_CONF",
            "TILES",
            "NEED/GPU",
            "$/H",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>(),
    ];
    for job in &comparison.jobs {
        let Some(setup) = comparison
            .derivation
            .classes
            .iter()
            .find(|s| s.class == job.key.class)
        else {
            continue;
        };
        let offline = match job.key.phase {
            jobs::RunPhase::Baseline => &setup.baseline,
            jobs::RunPhase::Optimized => &setup.optimized,
        };
        let mut row = vec![
            job.name(),
            job.key.class.clone(),
            job.key.phase.to_string(),
            job.key.run.to_string(),
        ];
        match offline {
            Offline::Planned(p) => {
                let [dtype, quantization, alloc_conf, _] =
                    crate::render::pytorch_cells(job.job.spec.runtime, p);
                row.extend([
                    crate::render_group::gpus_cell(p),
                    dtype,
                    quantization,
                    if p.flash_attention { "on" } else { "off" }.into(),
                    alloc_conf,
                    p.max_tiles.map_or("-".into(), |t| t.to_string()),
                    vramfit_planner::gib(p.memory.needed_per_gpu_mib),
                    if p.hourly_price_cents == 0 {
                        "-".into()
                    } else {
                        format!("{:.2}", f64::from(p.hourly_price_cents) / 100.0)
                    },
                ]);
            }
            // Only runnable specs become jobs; an unknown class is the cluster's to plan.
            Offline::UnknownClass | Offline::CannotRun(_) => row.extend(["?"; 8].map(String::from)),
        }
        rows.push(row);
    }
    out.push_str(&crate::render::columns(&rows));
    let mut notes = Vec::new();
    for setup in &comparison.derivation.classes {
        if setup.optimized == Offline::UnknownClass {
            notes.push(format!(
                "{}: neither built in nor in --node-classes: not planned here (the cluster plans it, or says it does not know it)",
                setup.class
            ));
        }
        match (setup.optimized_skipped(), setup.baseline_skipped()) {
            (Some(why), _) => notes.push(format!("{}: not compared: {why}", setup.class)),
            (None, Some(why)) => notes.push(format!(
                "{}: compared on its optimized plan only: {why}",
                setup.class
            )),
            (None, None) => {}
        }
    }
    if !notes.is_empty() {
        out.push('\n');
    }
    for note in notes {
        let _ = writeln!(out, "{note}");
    }
    out
}

/// The report as the command prints it.
pub fn report_output(report: &Report, format: Format) -> Result<String, CliError> {
    let serialize = |e: String| CliError::Serialize(e);
    match format {
        Format::Table => Ok(report::table(report)),
        Format::Json => serde_json::to_string_pretty(report)
            .map(|s| s + "\n")
            .map_err(|e| serialize(e.to_string())),
        Format::Yaml => serde_yaml::to_string(report).map_err(|e| serialize(e.to_string())),
    }
}

/// Writes report.json, report.md and chart.svg into `dir` (created if missing).
pub fn write_outputs(report: &Report, dir: &Path) -> Result<Vec<PathBuf>, CliError> {
    let json = report_output(report, Format::Json)?;
    write_files(
        dir,
        [
            ("report.json", json),
            ("report.md", report::markdown(report, Some("chart.svg"))),
            ("chart.svg", svg::chart(report)),
        ],
    )
}

/// What a dry run plans, into `dir` (created if missing): plan.txt (the table it prints) and
/// jobs.yaml (the InferenceJobs it would create, for `kubectl apply -f`). The report files
/// come from a real run only: a dry run has no figures to put in them.
pub fn write_dry_run(comparison: &Comparison, dir: &Path) -> Result<Vec<PathBuf>, CliError> {
    write_files(
        dir,
        [
            ("plan.txt", dry_run_output(comparison, Format::Table)?),
            ("jobs.yaml", dry_run_output(comparison, Format::Yaml)?),
        ],
    )
}

fn write_files<const N: usize>(
    dir: &Path,
    files: [(&str, String); N],
) -> Result<Vec<PathBuf>, CliError> {
    std::fs::create_dir_all(dir).map_err(|source| CliError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut written = Vec::new();
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|source| CliError::Write {
            path: path.clone(),
            source,
        })?;
        written.push(path);
    }
    Ok(written)
}

fn plain<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}
