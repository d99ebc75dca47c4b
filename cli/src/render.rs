//! The output of each command: tables for people, JSON/YAML for scripts.
use std::fmt::Write;

use serde::Serialize;
use vramfit_api::{Fallback, Plan, Runtime};
use vramfit_planner::gib;
use vramfit_planner::ranking::{self, Verdict};
use vramfit_planner::{
    GpuUnit, JobInput, NodeClass, model_catalog, plan_for_class, resolve_job, workload,
};

use vramfit_api::adapters::ResolvedAdapter;
use vramfit_planner::adapters::{Mode, from_tuning_job};

use crate::args::{ClassesArgs, CrdsArgs, Format, PlanArgs};
use crate::error::CliError;
use crate::manifest;

/// One class's outcome, for JSON/YAML output.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ClassOutcome {
    node_class: String,
    gpus: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    plan: Option<Plan>,
    #[serde(skip_serializing_if = "Option::is_none")]
    env: Option<Vec<EnvVar>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<Vec<String>>,
    /// A group's pods, rank 0 (the leader) first: what each runs, as the operator builds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    ranks: Option<Vec<crate::render_group::RankOutcome>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cannot_run: Option<String>,
}

/// One env var of the pod, as a container's `env` lists it.
#[derive(Serialize)]
pub(crate) struct EnvVar {
    pub(crate) name: String,
    pub(crate) value: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PlanReport {
    job: String,
    model: String,
    runtime: String,
    preference: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    chosen: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    serve: Option<ServeReport>,
    classes: Vec<ClassOutcome>,
}

/// What `vramfit plan` prints, and whether any class it planned for can run the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    /// The table, JSON or YAML.
    pub output: String,
    /// A class was chosen; `false` is exit code [`crate::error::EXIT_NO_CLASS_CAN_RUN`].
    pub runnable: bool,
}

/// A served job's `serve`, as `vramfit plan` shows it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ServeReport {
    replicas: u32,
    service: String,
    service_type: String,
    port: u16,
    health_path: String,
    model_load_timeout_seconds: u32,
    replica_classes: String,
    /// What vLLM and llama.cpp get appended to find where to listen.
    listen_args: Vec<String>,
    /// `serve.autoscaling`, as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    autoscaling: Option<vramfit_api::autoscaling::AutoscalingSpec>,
    /// `serve.adapters`, each as resolved from its fine-tuning job of the file.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    adapters: Vec<ResolvedAdapter>,
}

impl ServeReport {
    fn of(job: &vramfit_api::InferenceJob, input: &JobInput) -> Option<Self> {
        let serve = job.spec.serve.as_ref()?;
        let listen = input.serve.as_ref()?;
        Some(Self {
            replicas: serve.replicas,
            service: job.metadata.name.clone().unwrap_or_default(),
            service_type: serve.service_type.as_str().to_string(),
            port: serve.port,
            health_path: serve
                .health_path_for(job.spec.runtime)
                .unwrap_or_default()
                .to_string(),
            model_load_timeout_seconds: serve.model_load_timeout(),
            replica_classes: serde_plain(&serve.replica_classes),
            listen_args: vramfit_planner::serving::listen_args(input.runtime, listen),
            autoscaling: serve.autoscaling.clone(),
            adapters: listen.adapters.clone(),
        })
    }
}

/// `vramfit plan`.
pub fn plan_command(args: &PlanArgs) -> Result<Planned, CliError> {
    let read = crate::model_inspect::read_model(args.model_from.as_deref(), &args.hub)?;
    let manifest::JobFile { job, tuning_jobs } =
        manifest::read_job_file(&args.file, read.as_ref())?;
    let mut input = resolve_job(&job.spec).map_err(|why| CliError::InvalidSpec {
        path: args.file.clone(),
        message: match (&job.spec.model.hugging_face, &read) {
            // The operator reads the repository; here the Hub is reached only when asked.
            (Some(hf), None) => {
                let repo = format!(
                    "{}@{}",
                    hf.repo,
                    hf.revision.as_deref().unwrap_or(vramfit_hub::DEFAULT_REVISION)
                );
                format!(
                    "{why}: model.huggingFace names {repo}, which the operator reads from the Hub; to plan it here, add --hub {repo} (or --model-from a local copy)"
                )
            }
            _ => why.to_string(),
        },
    })?;
    let resolved =
        resolve_adapters(&job, &tuning_jobs).map_err(|message| CliError::InvalidSpec {
            path: args.file.clone(),
            message,
        })?;
    vramfit_planner::adapters::attach(&mut input, resolved);
    let mut classes = manifest::classes(args.node_classes.as_ref())?;
    if let Some(name) = &args.class {
        classes.retain(|c| &c.name == name);
        if classes.is_empty() {
            let known = manifest::classes(args.node_classes.as_ref())?
                .iter()
                .map(|c| c.name.clone())
                .collect::<Vec<_>>()
                .join(", ");
            return Err(CliError::UnknownClass {
                name: name.clone(),
                known,
            });
        }
    }
    let fallback = Fallback::default();
    let planned = classes
        .iter()
        .map(|c| (c, plan_for_class(&input, c, &fallback)));
    // No cluster here: every class has room. The operator chooses with the same function and
    // the free GPUs of its nodes.
    let choice = ranking::choose_class(input.preference, planned, |_, _| true);
    let chosen = choice.chosen().map(|(class, _)| class.name.clone());
    let name = job
        .metadata
        .name
        .clone()
        .unwrap_or_else(|| "<unnamed>".into());
    let namespace = job
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let report = PlanReport {
        job: format!("{namespace}/{name}"),
        model: input.model.name.clone(),
        runtime: serde_plain(&input.runtime),
        preference: serde_plain(&input.preference),
        chosen,
        serve: ServeReport::of(&job, &input),
        classes: choice
            .classes
            .iter()
            .map(|c| {
                outcome(
                    &job,
                    &input,
                    c.class,
                    &c.verdict,
                    args.class.is_some() || args.output != Format::Table,
                )
            })
            .collect(),
    };
    let output = match args.output {
        Format::Json => to_json(&report)?,
        Format::Yaml => to_yaml(&report)?,
        Format::Table => plan_table(&input, &report, args.class.is_some()),
    };
    Ok(Planned {
        output,
        runnable: report.chosen.is_some(),
    })
}

/// Each adapter of a served job's `serve.adapters` from the fine-tuning job of that name in
/// the same file and namespace, planned from its spec (no cluster here); the first refusal's
/// line otherwise.
fn resolve_adapters(
    job: &vramfit_api::InferenceJob,
    tuning_jobs: &[vramfit_api::InferenceJob],
) -> Result<Vec<ResolvedAdapter>, String> {
    let namespace = |j: &vramfit_api::InferenceJob| {
        j.metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into())
    };
    let adapters = job.spec.serve.iter().flat_map(|s| &s.adapters);
    adapters
        .map(|adapter| {
            let tuning = tuning_jobs.iter().find(|t| {
                t.metadata.name.as_deref() == Some(adapter.tuning_job.name.as_str())
                    && namespace(t) == namespace(job)
            });
            from_tuning_job(adapter, job, tuning, Mode::Planned).map_err(|refusal| {
                if tuning.is_none() {
                    format!(
                        "{refusal} (vramfit plan reads the fine-tuning jobs from the same file: add it as another document)"
                    )
                } else {
                    refusal.to_string()
                }
            })
        })
        .collect()
}

fn outcome(
    job: &vramfit_api::InferenceJob,
    input: &JobInput,
    class: &NodeClass,
    verdict: &Verdict,
    with_pod: bool,
) -> ClassOutcome {
    let gpus = format!(
        "{}×{} {}",
        class.gpus_per_node,
        class.describe_gpu(),
        gib(class.memory_mib)
    );
    match verdict {
        Verdict::Chosen(plan) | Verdict::RankedLower(plan) | Verdict::NoRoom(plan) => {
            ClassOutcome {
                node_class: class.name.clone(),
                gpus,
                env: with_pod.then(|| {
                    workload::plan_env(input, plan)
                        .into_iter()
                        .map(|(name, value)| EnvVar { name, value })
                        .collect()
                }),
                args: with_pod.then(|| workload::runtime_args(input, plan)),
                ranks: with_pod
                    .then(|| crate::render_group::ranks(job, input, plan))
                    .filter(|ranks| !ranks.is_empty()),
                plan: Some(plan.clone()),
                cannot_run: None,
            }
        }
        Verdict::CannotRun(why) => ClassOutcome {
            node_class: class.name.clone(),
            gpus,
            plan: None,
            env: None,
            args: None,
            ranks: None,
            cannot_run: Some(why.to_string()),
        },
    }
}

fn plan_table(input: &JobInput, report: &PlanReport, details: bool) -> String {
    let mut out = match &input.tuning {
        Some(tuning) => crate::render_tuning::table(
            tuning,
            &report.job,
            &report.model,
            &report.preference,
            report
                .classes
                .iter()
                .map(|c| (c.node_class.as_str(), c.gpus.as_str(), c.plan.as_ref())),
        ),
        None => inference_table(input, report),
    };
    match &report.chosen {
        Some(chosen) => {
            let which = if report.serve.is_some() {
                " for the first replica; the next ones go to the next class with room"
            } else {
                ""
            };
            let _ = writeln!(
                out,
                "\nChosen ({}): {chosen}{which} (before capacity: the operator also needs free GPUs)",
                report.preference
            );
        }
        None => out.push_str("\nNo class can run this job.\n"),
    }
    for c in &report.classes {
        let _ = writeln!(out, "\n{} ({}):", c.node_class, c.gpus);
        match (&c.plan, &c.cannot_run) {
            (Some(p), _) => {
                for r in &p.reasons {
                    let _ = writeln!(out, "  - {r}");
                }
                for w in &p.warnings {
                    let _ = writeln!(out, "  ! {w}");
                }
                for line in crate::render_group::group_lines(p) {
                    let _ = writeln!(out, "  {line}");
                }
            }
            (None, Some(why)) => {
                let _ = writeln!(out, "  cannot run: {why}");
            }
            (None, None) => {}
        }
        if details {
            if let Some(env) = &c.env {
                let _ = writeln!(out, "  env:");
                for EnvVar { name, value } in env {
                    let _ = writeln!(out, "    {name}={value}");
                }
            }
            if let Some(args) = c.args.as_ref().filter(|a| !a.is_empty()) {
                let label = if c.ranks.is_some() {
                    "the plan's runtime args (each rank's whole command line below)"
                } else {
                    "runtime args"
                };
                let _ = writeln!(out, "  {label}: {}", args.join(" "));
            }
            if let Some(ranks) = &c.ranks {
                out.push_str(&crate::render_group::ranks_text(ranks));
            }
        }
    }
    out
}

/// The header and table of an inference job's plans.
fn inference_table(input: &JobInput, report: &PlanReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "InferenceJob {}: {} under {}, context {} × batch {}, preference {}\n",
        report.job,
        report.model,
        report.runtime,
        input.context_length,
        input.batch_size,
        report.preference
    );
    if let Some(serve) = &report.serve {
        let listen = if serve.listen_args.is_empty() {
            format!("VRAMFIT_PORT={}", serve.port)
        } else {
            format!("{} (and VRAMFIT_PORT)", serve.listen_args.join(" "))
        };
        let _ = writeln!(
            out,
            "Served: {} replica(s) behind Service {} ({}, port {}), health GET {}, model-load budget {} s, replica classes {}; \
             each replica gets the plan of the class it lands on (below), and listens with {listen}\n",
            serve.replicas,
            serve.service,
            serve.service_type,
            serve.port,
            serve.health_path,
            serve.model_load_timeout_seconds,
            serve.replica_classes,
        );
        let replicas = match &serve.autoscaling {
            Some(a) => format!(
                "Autoscaled: {} to {} replicas, each kept at {} % of its SEQS",
                a.min_replicas, a.max_replicas, a.target_utilization_percent
            ),
            None => "Not autoscaled".to_string(),
        };
        let _ = writeln!(
            out,
            "{replicas}. SEQS: the sequences a replica serves at once on the class (--max-num-seqs, --parallel), the unit of its load\n"
        );
        if !serve.adapters.is_empty() {
            let listed: Vec<String> = serve
                .adapters
                .iter()
                .map(|a| format!("{} ({}, rank {})", a.name, a.source, a.rank))
                .collect();
            let _ = writeln!(
                out,
                "LoRA adapters: {}; planned from their fine-tuning jobs' specs, each mounted at {}/<name>. LORA/GPU: their share of each GPU on the class (vLLM's LoRA buffers, else their weights), part of NEED/GPU\n",
                listed.join(", "),
                vramfit_api::adapters::ADAPTERS_MOUNT_ROOT
            );
        }
    }
    let header = [
        "CLASS",
        "NODE",
        "GPUS",
        "DTYPE",
        "QUANT",
        "FLASH",
        "ALLOC_CONF",
        "FRAC",
        "TILES",
        "LAYERS",
        "KV",
        "NEED/GPU",
        "USABLE/GPU",
        "$/H",
    ];
    let served = report.serve.is_some();
    let with_adapters = report
        .serve
        .as_ref()
        .is_some_and(|s| !s.adapters.is_empty());
    let mut header: Vec<&str> = header.to_vec();
    if served {
        header.insert(header.len() - 3, "SEQS");
    }
    if with_adapters {
        header.insert(header.len() - 3, "LORA/GPU");
    }
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for c in &report.classes {
        let row = match &c.plan {
            Some(p) => {
                let [dtype, quantization, alloc_conf, fraction] = pytorch_cells(input.runtime, p);
                let mut cells = vec![
                    c.node_class.clone(),
                    c.gpus.clone(),
                    crate::render_group::gpus_cell(p),
                    dtype,
                    quantization,
                    if p.flash_attention { "on" } else { "off" }.into(),
                    alloc_conf,
                    fraction,
                    p.max_tiles.map_or("-".into(), |t| t.to_string()),
                    p.llama_cpp.map_or("-".into(), |l| {
                        format!("{}/{}", l.gpu_layers, l.total_layers)
                    }),
                    p.llama_cpp
                        .map_or("-".into(), |l| l.kv_cache_type.as_str().into()),
                    gib(p.memory.needed_per_gpu_mib),
                    gib(p.memory.usable_per_gpu_mib),
                    if p.hourly_price_cents == 0 {
                        "-".into()
                    } else {
                        format!("{:.2}", f64::from(p.hourly_price_cents) / 100.0)
                    },
                ];
                if served {
                    let seqs = p.concurrency.map_or("-".into(), |n| n.to_string());
                    cells.insert(cells.len() - 3, seqs);
                }
                if with_adapters {
                    let share = vramfit_planner::error::adapters_share(p.memory.adapters_mib);
                    cells.insert(cells.len() - 3, share);
                }
                cells
            }
            None => {
                let mut row = vec![c.node_class.clone(), c.gpus.clone(), "cannot run".into()];
                row.resize(header.len(), String::new());
                row
            }
        };
        rows.push(row);
    }
    out.push_str(&columns(&rows));
    out
}

/// The table cells of a plan's PyTorch settings: dtype, quantization, allocator conf and
/// memory fraction; `-` for a runtime that reads none of them (llama.cpp: its reasons say so).
pub(crate) fn pytorch_cells(runtime: Runtime, plan: &Plan) -> [String; 4] {
    if !workload::reads_pytorch_settings(runtime) {
        return ["-"; 4].map(String::from);
    }
    [
        plan.dtype.as_str().into(),
        plan.quantization.as_str().into(),
        plan.pytorch_cuda_alloc_conf.clone(),
        format!("{:.2}", f64::from(plan.memory_fraction_percent) / 100.0),
    ]
}

/// `vramfit classes`.
pub fn classes_command(args: &ClassesArgs) -> Result<String, CliError> {
    let classes = manifest::classes(args.node_classes.as_ref())?;
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Row {
        name: String,
        product: String,
        /// What a pod gets per GPU it requests: `whole`, `mig`, `shared`.
        unit: &'static str,
        /// The resource pods request.
        resource: String,
        gpus_per_node: u32,
        memory_mib: u64,
        compute_capability: String,
        architecture: &'static str,
        tier: &'static str,
        pytorch_cuda_alloc_conf: String,
        memory_fraction_percent: u32,
        memory_buffer_mib: u64,
        usable_per_gpu_mib: u64,
        max_tiles: Option<u32>,
        hourly_price_cents_per_gpu: Option<u32>,
        /// An admin's GpuNodeClass: `false` closes the class to every job.
        allow_jobs: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        runtime_class_name: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        allowed_toleration_keys: Option<Vec<String>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        allowed_priority_classes: Option<Vec<String>>,
    }
    let rows: Vec<Row> = classes
        .iter()
        .map(|c| Row {
            name: c.name.clone(),
            product: c.describe_product(),
            unit: match c.unit {
                GpuUnit::Whole => "whole",
                GpuUnit::MigSlice { .. } => "mig",
                GpuUnit::Shared { .. } => "shared",
            },
            resource: c.resource.clone(),
            gpus_per_node: c.gpus_per_node,
            memory_mib: c.memory_mib,
            compute_capability: c.capability.to_string(),
            architecture: c.architecture().as_str(),
            tier: c.tier.as_str(),
            pytorch_cuda_alloc_conf: c.pytorch_cuda_alloc_conf.clone(),
            memory_fraction_percent: c.memory_fraction_percent,
            memory_buffer_mib: c.memory_buffer_mib,
            usable_per_gpu_mib: c.usable_per_gpu_mib(),
            max_tiles: c
                .max_tiles
                .or(Some(vramfit_planner::tiles::max_tiles_for_vram(
                    c.memory_mib,
                ))),
            hourly_price_cents_per_gpu: c.hourly_price_cents_per_gpu,
            allow_jobs: c.allow_jobs,
            runtime_class_name: c.runtime_class_name.clone(),
            allowed_toleration_keys: c.allowed_toleration_keys.clone(),
            allowed_priority_classes: c.allowed_priority_classes.clone(),
        })
        .collect();
    match args.output {
        Format::Json => to_json(&rows),
        Format::Yaml => to_yaml(&rows),
        Format::Table => {
            let mut table = vec![
                [
                    "CLASS",
                    "PRODUCT",
                    "GPUS",
                    "VRAM",
                    "CC",
                    "ARCH",
                    "TIER",
                    "ALLOC_CONF",
                    "FRAC",
                    "BUFFER",
                    "USABLE",
                    "TILES",
                    "$/GPU/H",
                    "JOBS",
                    "RESOURCE",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>(),
            ];
            for r in &rows {
                table.push(vec![
                    r.name.clone(),
                    r.product.clone(),
                    r.gpus_per_node.to_string(),
                    gib(r.memory_mib),
                    r.compute_capability.clone(),
                    r.architecture.into(),
                    r.tier.into(),
                    r.pytorch_cuda_alloc_conf.clone(),
                    format!("{:.2}", f64::from(r.memory_fraction_percent) / 100.0),
                    gib(r.memory_buffer_mib),
                    gib(r.usable_per_gpu_mib),
                    r.max_tiles.map_or("-".into(), |t| t.to_string()),
                    r.hourly_price_cents_per_gpu
                        .map_or("-".into(), |c| format!("{:.2}", f64::from(c) / 100.0)),
                    if r.allow_jobs { "allowed" } else { "closed" }.into(),
                    r.resource.clone(),
                ]);
            }
            let mut out = columns(&table);
            // What an admin's GpuNodeClass decides beyond the figures, one line per class.
            let admin: Vec<String> = rows
                .iter()
                .filter_map(|r| {
                    let mut settings = Vec::new();
                    if !r.allow_jobs {
                        settings.push("allowJobs: false (vramfit places no job here)".to_string());
                    }
                    if let Some(name) = &r.runtime_class_name {
                        settings.push(format!("runtimeClassName: {name}"));
                    }
                    if let Some(keys) = &r.allowed_toleration_keys {
                        settings.push(format!("allowedTolerationKeys: [{}]", keys.join(", ")));
                    }
                    if let Some(classes) = &r.allowed_priority_classes {
                        settings.push(format!("allowedPriorityClasses: [{}]", classes.join(", ")));
                    }
                    (!settings.is_empty()).then(|| format!("  {}: {}", r.name, settings.join("; ")))
                })
                .collect();
            if !admin.is_empty() {
                out.push_str("\nSet by GpuNodeClass:\n");
                for line in admin {
                    let _ = writeln!(out, "{line}");
                }
            }
            Ok(out)
        }
    }
}

/// `vramfit presets`.
/// A preset's weights on disk: the GGUF file, a pre-quantized checkpoint's bytes, else the
/// parameters at 16 bits.
fn preset_size(shape: &model_catalog::Shape<&'static str>) -> String {
    let gb = |bytes: u64| format!("{:.2} GB", bytes as f64 / 1e9);
    match (
        shape.gguf_file_bytes,
        shape.pre_quantized,
        shape.weight_bytes,
    ) {
        (Some(file), _, _) => gb(file),
        (None, Some(_), Some(bytes)) => gb(bytes),
        _ => gb(shape.parameters.saturating_mul(2)),
    }
}

/// How a preset's weights are stored.
fn preset_format(shape: &model_catalog::Shape<&'static str>) -> String {
    match (shape.gguf_file_bytes, shape.pre_quantized) {
        (Some(_), _) => "GGUF".into(),
        (None, Some(q)) => format!("{} {}-bit", q.method.as_str(), q.weight_bits),
        (None, None) => "16-bit".into(),
    }
}

pub fn presets_command() -> String {
    let mut rows = vec![
        [
            "PRESET", "MODEL", "PARAMS", "LAYERS", "HIDDEN", "HEADS", "KV", "CONTEXT", "WEIGHTS",
            "FORMAT", "EXPERTS", "VISION",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>(),
    ];
    for p in model_catalog::PRESETS {
        rows.push(vec![
            p.key.into(),
            p.shape.name.into(),
            format!("{:.2}B", p.shape.parameters as f64 / 1e9),
            p.shape.layers.to_string(),
            p.shape.hidden_size.to_string(),
            p.shape.attention_heads.to_string(),
            p.shape.kv_heads.to_string(),
            p.shape.context_limit.to_string(),
            preset_size(&p.shape),
            preset_format(&p.shape),
            p.shape.experts.map_or("-".into(), |e| {
                format!(
                    "{e} ({:.1}B active)",
                    p.shape.active_parameters.unwrap_or(p.shape.parameters) as f64 / 1e9
                )
            }),
            p.shape.vision.to_string(),
        ]);
    }
    let mut out = columns(&rows);
    out.push_str("\nSources:\n");
    for p in model_catalog::PRESETS {
        let _ = writeln!(out, "  {}: {}", p.key, p.source);
    }
    out
}

/// `vramfit crds`.
pub fn crds_command(args: &CrdsArgs) -> Result<String, CliError> {
    let serialize = |e: serde_yaml::Error| CliError::Serialize(e.to_string());
    match &args.output_dir {
        None => vramfit_api::crdgen::all_crds_yaml().map_err(serialize),
        Some(dir) => {
            let mut written = String::new();
            for (file, yaml) in vramfit_api::crdgen::crd_documents().map_err(serialize)? {
                let path = dir.join(file);
                std::fs::write(&path, yaml).map_err(|source| CliError::Write {
                    path: path.clone(),
                    source,
                })?;
                let _ = writeln!(written, "wrote {}", path.display());
            }
            Ok(written)
        }
    }
}

/// Left-aligned columns separated by two spaces.
pub(crate) fn columns(rows: &[Vec<String>]) -> String {
    let width = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..width)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out
}

fn serde_plain<T: Serialize>(value: &T) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn to_json<T: Serialize>(value: &T) -> Result<String, CliError> {
    serde_json::to_string_pretty(value)
        .map(|s| s + "\n")
        .map_err(|e| CliError::Serialize(e.to_string()))
}

fn to_yaml<T: Serialize>(value: &T) -> Result<String, CliError> {
    serde_yaml::to_string(value).map_err(|e| CliError::Serialize(e.to_string()))
}
