//! The fair baseline (pure): the same generic settings on every compared class, and each
//! class's own optimized plan (docs/compare.md: what "fair" means).
use serde::Serialize;
use vramfit_api::tuning::{TuningMethod, TuningMethodRequest};
use vramfit_api::{
    DtypeRequest, Fallback, InferenceJobSpec, JobOverrides, NodeClassSelection, Plan, Quantization,
    Runtime,
};
use vramfit_planner::{NodeClass, plan_for_class, resolve_job, tiles};

/// PYTORCH_CUDA_ALLOC_CONF of the baseline. The CRD takes no empty value (minLength 1) and an
/// unset override means the class's tuned value, so the baseline names PyTorch's own default
/// for the option the classes tune around: the allocator then behaves as with the variable
/// unset (no max_split_size_mb, no expandable segments).
pub const PYTORCH_DEFAULT_ALLOC_CONF: &str = "expandable_segments:False";

/// The generic settings every class runs in the baseline phase.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BaselineSettings {
    /// Always float16: every class runs it natively.
    pub dtype: String,
    /// The least quantization that fits (`none` unless the model cannot fit otherwise);
    /// unset for llama.cpp, whose weights keep the GGUF file's formats.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quantization: Option<Quantization>,
    /// Fine-tuning: the best method that the most compared classes can run, on every class
    /// (the micro-batch, checkpointing and accumulation are each class's own: they keep the
    /// effective batch, so the training is the same).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tuning_method: Option<TuningMethod>,
    /// Always off: not every class has the kernels.
    pub flash_attention: bool,
    /// [`PYTORCH_DEFAULT_ALLOC_CONF`].
    pub pytorch_cuda_alloc_conf: String,
    /// The smallest MAX_TILES of the compared classes (vision models).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tiles: Option<u32>,
    /// Context length every class is planned for.
    pub context_length: u32,
    /// Sequences at once, the job's on every class.
    pub batch_size: u32,
}

/// What the planner says of a class, before anything runs.
#[derive(Clone, Debug, PartialEq)]
pub enum Offline {
    /// The plan the operator will make, barring capacity.
    Planned(Box<Plan>),
    /// The class cannot run this spec, and why.
    CannotRun(String),
    /// Neither built in nor in --node-classes: only the cluster can plan it.
    UnknownClass,
}

impl Offline {
    /// The plan, where there is one.
    pub fn plan(&self) -> Option<&Plan> {
        match self {
            Offline::Planned(plan) => Some(plan),
            _ => None,
        }
    }
}

/// One compared class: its two specs and what the planner says of them.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassSetup {
    /// The class name as given.
    pub class: String,
    /// The baseline spec pinned to the class; `None` when the class cannot run it (the
    /// reason is in `baseline`).
    pub baseline_spec: Option<InferenceJobSpec>,
    /// The baseline on this class.
    pub baseline: Offline,
    /// The job as written, pinned to the class; `None` when the class cannot run it (the
    /// reason is in `optimized`).
    pub optimized_spec: Option<InferenceJobSpec>,
    /// The optimized plan on this class.
    pub optimized: Offline,
}

impl ClassSetup {
    /// Why this class is compared on its optimized plan only.
    pub fn baseline_skipped(&self) -> Option<String> {
        match (&self.baseline_spec, &self.baseline) {
            (None, Offline::CannotRun(why)) => Some(format!("cannot run the baseline: {why}")),
            (None, _) => Some("cannot run the baseline".into()),
            _ => None,
        }
    }

    /// Why this class runs nothing at all: it cannot run the job as written either.
    pub fn optimized_skipped(&self) -> Option<String> {
        match (&self.optimized_spec, &self.optimized) {
            (None, Offline::CannotRun(why)) => Some(format!("cannot run the job: {why}")),
            (None, _) => Some("cannot run the job".into()),
            _ => None,
        }
    }
}

/// The baseline and every class's setup.
#[derive(Clone, Debug, PartialEq)]
pub struct Derivation {
    /// The generic settings.
    pub settings: BaselineSettings,
    /// The compared classes, in the order given.
    pub classes: Vec<ClassSetup>,
    /// How the settings were chosen, one line each.
    pub notes: Vec<String>,
}

/// `spec` allowed on `class` only: the comparison decides the class, not the operator.
pub fn pinned(spec: &InferenceJobSpec, class: &str) -> InferenceJobSpec {
    let mut spec = spec.clone();
    spec.node_classes = Some(NodeClassSelection {
        allowed: vec![class.to_string()],
        denied: Vec::new(),
    });
    spec
}

/// The baseline spec (not yet pinned): the job with the generic settings, everything else
/// (model, image, command, args, input data, context, batch, GPU bounds) as written.
fn generic_spec(
    spec: &InferenceJobSpec,
    quantization: Option<Quantization>,
    tuning_method: Option<TuningMethod>,
    max_tiles: Option<u32>,
) -> InferenceJobSpec {
    let mut spec = spec.clone();
    spec.dtype = DtypeRequest::Float16;
    if let Some(q) = quantization {
        spec.allowed_quantizations = Some(vec![q]);
    }
    if let (Some(method), Some(tuning)) = (tuning_method, spec.tuning.as_mut()) {
        tuning.method = match method {
            TuningMethod::Full => TuningMethodRequest::Full,
            TuningMethod::Lora => TuningMethodRequest::Lora,
            TuningMethod::Qlora => TuningMethodRequest::Qlora,
        };
        if method == TuningMethod::Full {
            tuning.lora = None;
        }
    }
    spec.overrides = Some(JobOverrides {
        max_tiles,
        flash_attention: Some(false),
        pytorch_cuda_alloc_conf: Some(PYTORCH_DEFAULT_ALLOC_CONF.into()),
    });
    spec
}

/// Plans `spec` pinned to `class`.
fn plan_on(spec: &InferenceJobSpec, class: &NodeClass) -> Offline {
    let pinned = pinned(spec, &class.name);
    match resolve_job(&pinned) {
        Err(why) => Offline::CannotRun(why.to_string()),
        Ok(input) => match plan_for_class(&input, class, &Fallback::default()) {
            Ok(plan) => Offline::Planned(Box::new(plan)),
            Err(why) => Offline::CannotRun(why.to_string()),
        },
    }
}

/// Derives the baseline for `spec` on the classes named in `chosen`, planning with `known`
/// (built-in classes and --node-classes). An invalid spec or an empty or repeated class list
/// is an error; a class that cannot run the baseline is not.
pub fn derive(
    spec: &InferenceJobSpec,
    known: &[NodeClass],
    chosen: &[String],
) -> Result<Derivation, String> {
    if chosen.is_empty() {
        return Err("--classes names no class".into());
    }
    for (i, name) in chosen.iter().enumerate() {
        if name.trim().is_empty() {
            return Err("--classes has an empty class name".into());
        }
        if chosen[..i].contains(name) {
            return Err(format!("--classes names {name} twice"));
        }
    }
    let input = resolve_job(spec).map_err(|why| why.to_string())?;
    let classes: Vec<(&String, Option<&NodeClass>)> = chosen
        .iter()
        .map(|name| (name, known.iter().find(|c| &c.name == name)))
        .collect();
    let known_chosen: Vec<&NodeClass> = classes.iter().filter_map(|(_, c)| *c).collect();
    let mut notes = Vec::new();

    // The smallest tiles any compared class would take, so that every class sees the same
    // image detail; a job's own maxTiles is already common.
    let max_tiles = if !input.model.vision {
        None
    } else if let Some(tiles) = input.overrides.max_tiles {
        notes.push(format!("MAX_TILES {tiles}: set by the job"));
        Some(tiles)
    } else {
        let smallest = known_chosen
            .iter()
            .map(|c| {
                c.max_tiles
                    .unwrap_or_else(|| tiles::max_tiles_for_vram(c.memory_mib))
            })
            .min();
        match smallest {
            Some(tiles) => notes.push(format!(
                "MAX_TILES {tiles}: the smallest of the compared classes"
            )),
            None => notes.push(
                "MAX_TILES left to each class: no compared class is known to plan from".into(),
            ),
        }
        smallest
    };

    // Quantization: the job's allowed levels, best first; the first that the most classes
    // can run (so `none` unless some class needs more, and then only as much as needed).
    let tuning_method = input
        .tuning
        .as_ref()
        .map(|t| common_method(spec, t.method, &known_chosen, max_tiles, &mut notes));
    let quantization = if tuning_method.is_some() {
        None
    } else if input.runtime == Runtime::Llamacpp {
        notes.push(
            "quantization: the GGUF file's (llama.cpp; dtype and allocator are not used either)"
                .into(),
        );
        None
    } else {
        let fits = |q: Quantization| {
            let generic = generic_spec(spec, Some(q), None, max_tiles);
            known_chosen
                .iter()
                .filter(|c| matches!(plan_on(&generic, c), Offline::Planned(_)))
                .count()
        };
        let counted: Vec<(Quantization, usize)> =
            input.quantizations.iter().map(|&q| (q, fits(q))).collect();
        let most = counted.iter().map(|(_, n)| *n).max().unwrap_or(0);
        let chosen_q = counted
            .iter()
            .find(|(_, n)| *n == most)
            .map(|(q, _)| *q)
            .unwrap_or(Quantization::None);
        let first = input.quantizations.first().copied();
        let tally = counted
            .iter()
            .map(|(q, n)| format!("{} fits {n} of {}", q.as_str(), known_chosen.len()))
            .collect::<Vec<_>>()
            .join(", ");
        notes.push(if Some(chosen_q) == first {
            format!(
                "quantization {}: the job's best allowed level ({tally})",
                chosen_q.as_str()
            )
        } else {
            format!(
                "quantization {}: the least that fits on the classes that can take the model ({tally})",
                chosen_q.as_str()
            )
        });
        Some(chosen_q)
    };

    let generic = generic_spec(spec, quantization, tuning_method, max_tiles);
    let setups = classes
        .iter()
        .map(|(name, class)| {
            let (baseline, optimized) = match class {
                Some(class) => (plan_on(&generic, class), plan_on(spec, class)),
                None => (Offline::UnknownClass, Offline::UnknownClass),
            };
            // A spec the planner already rejects would only wait Unschedulable: not created.
            let runs = |o: &Offline| !matches!(o, Offline::CannotRun(_));
            ClassSetup {
                class: (*name).clone(),
                baseline_spec: runs(&baseline).then(|| pinned(&generic, name)),
                optimized_spec: runs(&optimized).then(|| pinned(spec, name)),
                baseline,
                optimized,
            }
        })
        .collect();
    Ok(Derivation {
        settings: BaselineSettings {
            dtype: "float16".into(),
            quantization,
            tuning_method,
            flash_attention: false,
            pytorch_cuda_alloc_conf: PYTORCH_DEFAULT_ALLOC_CONF.into(),
            max_tiles,
            context_length: input.context_length,
            batch_size: input.batch_size,
        },
        classes: setups,
        notes,
    })
}

/// The fine-tuning method of the baseline: of the methods the job allows (quality order), the
/// first that the most compared classes can run.
fn common_method(
    spec: &InferenceJobSpec,
    request: TuningMethodRequest,
    classes: &[&NodeClass],
    max_tiles: Option<u32>,
    notes: &mut Vec<String>,
) -> TuningMethod {
    let allowed: Vec<TuningMethod> = match request {
        TuningMethodRequest::Auto => TuningMethod::LADDER.to_vec(),
        TuningMethodRequest::Full => vec![TuningMethod::Full],
        TuningMethodRequest::Lora => vec![TuningMethod::Lora],
        TuningMethodRequest::Qlora => vec![TuningMethod::Qlora],
    };
    let counted: Vec<(TuningMethod, usize)> = allowed
        .iter()
        .map(|&m| {
            let generic = generic_spec(spec, None, Some(m), max_tiles);
            let runs = classes
                .iter()
                .filter(|c| matches!(plan_on(&generic, c), Offline::Planned(_)))
                .count();
            (m, runs)
        })
        .collect();
    let most = counted.iter().map(|(_, n)| *n).max().unwrap_or(0);
    let chosen = counted
        .iter()
        .find(|(_, n)| *n == most)
        .map_or(TuningMethod::Qlora, |(m, _)| *m);
    let tally = counted
        .iter()
        .map(|(m, n)| format!("{} fits {n} of {}", m.as_str(), classes.len()))
        .collect::<Vec<_>>()
        .join(", ");
    notes.push(format!(
        "method {}: the best that the most compared classes can run ({tally})",
        chosen.as_str()
    ));
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramfit_api::{Dtype, InferenceJob};
    use vramfit_planner::builtin_classes;

    fn spec(yaml: &str) -> InferenceJobSpec {
        let job: InferenceJob = serde_yaml::from_str(&format!(
            "apiVersion: vramfit.io/v1alpha1\nkind: InferenceJob\nmetadata: {{name: j}}\nspec:\n{yaml}"
        ))
        .expect("test job parses");
        job.spec
    }

    fn vision_job() -> InferenceJobSpec {
        spec(
            "  model: {preset: internvl3-8b}\n  runtime: transformers\n  image: img\n  contextLength: 4096\n  batchSize: 2\n  args: [--input, /data]\n",
        )
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_fine_tuning_baseline_runs_one_method_everywhere_in_float16() {
        let job = spec(
            "  model: {preset: mistral-7b-instruct-v0.3}\n  runtime: transformers\n  image: img\n  tuning: {sequenceLength: 512, effectiveBatch: 32, lora: {rank: 8}}\n",
        );
        let d = derive(
            &job,
            &builtin_classes(),
            &names(&["t4-x1", "a10g-x1", "h100-80gb-x8"]),
        )
        .unwrap();
        // Full fits the H100s only, LoRA the A10G and the H100s, QLoRA all three.
        assert_eq!(d.settings.tuning_method, Some(TuningMethod::Qlora));
        assert_eq!(d.settings.quantization, None);
        assert!(
            d.notes.iter().any(|n| n.starts_with("method qlora")),
            "{:?}",
            d.notes
        );
        for setup in &d.classes {
            let plan = setup.baseline.plan().expect("every class runs QLoRA");
            assert_eq!(plan.dtype, Dtype::Float16);
            assert_eq!(plan.tuning.as_ref().unwrap().method, TuningMethod::Qlora);
            let spec = setup.baseline_spec.as_ref().unwrap();
            assert_eq!(spec.allowed_quantizations, None, "refused beside tuning");
        }
        let h100 = d.classes[2].optimized.plan().unwrap();
        assert_eq!(h100.tuning.as_ref().unwrap().method, TuningMethod::Full);
    }

    #[test]
    fn baseline_is_float16_no_flash_default_allocator_smallest_common_tiles() {
        let job = vision_job();
        let d = derive(
            &job,
            &builtin_classes(),
            &names(&["a10g-x4", "h100-80gb-x8"]),
        )
        .unwrap();
        assert_eq!(d.settings.dtype, "float16");
        assert!(!d.settings.flash_attention);
        assert_eq!(
            d.settings.pytorch_cuda_alloc_conf,
            PYTORCH_DEFAULT_ALLOC_CONF
        );
        assert_eq!(d.settings.quantization, Some(Quantization::None));
        // A10G plans 18 tiles, H100 32: the baseline takes 18 on both.
        assert_eq!(d.settings.max_tiles, Some(18));
        for setup in &d.classes {
            let plan = setup
                .baseline
                .plan()
                .expect("both classes run the baseline");
            assert_eq!(plan.dtype, Dtype::Float16);
            assert!(!plan.flash_attention);
            assert_eq!(plan.max_tiles, Some(18));
            assert_eq!(plan.pytorch_cuda_alloc_conf, PYTORCH_DEFAULT_ALLOC_CONF);
            assert_eq!(plan.quantization, Quantization::None);
            let spec = setup.baseline_spec.as_ref().unwrap();
            assert_eq!(
                spec.node_classes.as_ref().unwrap().allowed,
                vec![setup.class.clone()]
            );
        }
        // The optimized plan on H100 is the class's own: bfloat16, flash attention, 32 tiles.
        let h100 = d.classes[1].optimized.plan().unwrap();
        assert_eq!(
            (h100.dtype, h100.flash_attention, h100.max_tiles),
            (Dtype::Bfloat16, true, Some(32))
        );
    }

    #[test]
    fn one_class_that_needs_int8_makes_int8_the_baseline_everywhere() {
        // InternVL3-8B needs 19.9 GiB unquantized on one A10G (18 usable): int8 is the least
        // quantization that fits there, and the H100 runs the same int8 in the baseline.
        let d = derive(
            &vision_job(),
            &builtin_classes(),
            &names(&["a10g-x1", "h100-80gb-x8"]),
        )
        .unwrap();
        assert_eq!(
            d.settings.quantization,
            Some(Quantization::Int8),
            "{:?}",
            d.notes
        );
        for setup in &d.classes {
            assert_eq!(
                setup.baseline.plan().unwrap().quantization,
                Quantization::Int8
            );
        }
        assert!(
            d.notes
                .iter()
                .any(|n| n.starts_with("quantization int8: the least"))
        );
    }

    #[test]
    fn input_data_context_and_batch_are_copied_never_varied() {
        let job = vision_job();
        let d = derive(&job, &builtin_classes(), &names(&["t4-x1", "a10g-x1"])).unwrap();
        assert_eq!(
            (d.settings.context_length, d.settings.batch_size),
            (4096, 2)
        );
        for setup in &d.classes {
            let optimized = setup.optimized_spec.as_ref().unwrap();
            for s in [setup.baseline_spec.as_ref().unwrap(), optimized] {
                assert_eq!(s.args, job.args);
                assert_eq!(s.image, job.image);
                assert_eq!(s.context_length, job.context_length);
                assert_eq!(s.batch_size, job.batch_size);
                assert_eq!(s.model, job.model);
                assert_eq!(s.pod, job.pod);
            }
            // The optimized spec is the job as written, pinned.
            let mut unpinned = optimized.clone();
            unpinned.node_classes = None;
            assert_eq!(unpinned, job);
        }
    }

    #[test]
    fn a_job_that_fits_nowhere_unquantized_takes_the_least_quantization_that_fits() {
        // 70B parameters in float16 (~140 GB) fit no single A10G node (4×24 GB); int8 does
        // not either, nf4 (~35 GB + overheads) does. An H200 node fits it unquantized, but
        // the baseline must be the same everywhere.
        let job = spec(
            "  model: {parameters: 70000000000, layers: 80, hiddenSize: 8192, attentionHeads: 64, kvHeads: 8}\n  runtime: vllm\n  image: img\n",
        );
        let d = derive(&job, &builtin_classes(), &names(&["a10g-x4", "h200-x8"])).unwrap();
        let q = d.settings.quantization.unwrap();
        assert_ne!(q, Quantization::None, "{:?}", d.notes);
        for setup in &d.classes {
            assert_eq!(
                setup.baseline.plan().unwrap().quantization,
                q,
                "{}",
                setup.class
            );
        }
        // Its optimized plan on H200 stays unquantized.
        let h200 = d.classes[1].optimized.plan().unwrap();
        assert_eq!(h200.quantization, Quantization::None);
    }

    #[test]
    fn a_class_that_cannot_run_the_baseline_is_marked_with_why() {
        // Only unquantized allowed: a 1g.10gb MIG slice cannot hold an 8B model in float16.
        let job = spec(
            "  model: {preset: mistral-7b-instruct-v0.3}\n  runtime: vllm\n  image: img\n  allowedQuantizations: [none]\n",
        );
        let d = derive(
            &job,
            &builtin_classes(),
            &names(&["a10g-x1", "h100-80gb-mig-1g-10gb-x7"]),
        )
        .unwrap();
        assert_eq!(d.settings.quantization, Some(Quantization::None));
        assert!(d.classes[0].baseline_skipped().is_none());
        let mig = &d.classes[1];
        assert!(mig.baseline_spec.is_none());
        let why = mig.baseline_skipped().unwrap();
        assert!(why.starts_with("cannot run the baseline: "), "{why}");
        // Nor the job as written: nothing is created for it, and it says why.
        assert!(mig.optimized_spec.is_none());
        assert!(
            mig.optimized_skipped()
                .unwrap()
                .starts_with("cannot run the job: ")
        );
        assert!(d.classes[0].optimized_skipped().is_none());
    }

    #[test]
    fn unknown_classes_are_kept_for_the_cluster_to_judge() {
        let d = derive(
            &vision_job(),
            &builtin_classes(),
            &names(&["a10g-x1", "b200-x8"]),
        )
        .unwrap();
        assert_eq!(d.classes[1].baseline, Offline::UnknownClass);
        assert!(d.classes[1].baseline_spec.is_some());
        // The tiles come from the known class only.
        assert_eq!(d.settings.max_tiles, Some(18));
    }

    #[test]
    fn llamacpp_keeps_the_gguf_formats() {
        let job = spec(
            "  model: {preset: mistral-7b-instruct-v0.3-q4_k_m}\n  runtime: llamacpp\n  image: img\n",
        );
        let d = derive(&job, &builtin_classes(), &names(&["t4-x1"])).unwrap();
        assert_eq!(d.settings.quantization, None);
        let spec = d.classes[0].baseline_spec.as_ref().unwrap();
        assert_eq!(spec.allowed_quantizations, job.allowed_quantizations);
        assert!(!d.classes[0].baseline.plan().unwrap().flash_attention);
    }

    #[test]
    fn bad_class_lists_are_errors() {
        let job = vision_job();
        let known = builtin_classes();
        assert!(derive(&job, &known, &[]).is_err());
        assert!(derive(&job, &known, &names(&["a10g-x1", "a10g-x1"])).is_err());
        assert!(derive(&job, &known, &names(&[" "])).is_err());
    }
}
