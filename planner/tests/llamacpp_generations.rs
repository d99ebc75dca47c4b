//! llama.cpp on Pascal, Volta and Turing (docs/planning.md): its own flash-attention kernels
//! run there, so every KV-cache type is open, and a smaller cache offloads more layers.
mod common;

use common::{class, job};
use vramfit_api::labels::ComputeCapability;
use vramfit_api::{Fallback, KvCacheType, Plan};
use vramfit_planner::{JobInput, NodeClass, plan_for_class, workload};

/// The card of the teams' first llama.cpp measurements (docs/planning.md, "llama.cpp (GGUF)"):
/// a Quadro P4000, Pascal, 8 GB.
fn p4000() -> NodeClass {
    NodeClass::new(
        "p4000-x1",
        "Quadro P4000",
        1,
        8_119,
        Some(ComputeCapability::new(6, 1)),
    )
}

/// Their job: a 7B GGUF with a long context, only `kv` allowed.
fn long_context(kv: &str) -> JobInput {
    job(&format!(
        "{{model: {{preset: mistral-7b-instruct-v0.3-q4_k_m}}, runtime: llamacpp, image: x, \
         contextLength: 32768, llamaCpp: {{kvCacheTypes: [{kv}]}}}}"
    ))
}

fn on(class: &NodeClass, j: &JobInput) -> Plan {
    plan_for_class(j, class, &Fallback::default()).expect("plans")
}

fn layers(p: &Plan) -> u32 {
    p.llama_cpp.expect("a llama.cpp plan").gpu_layers
}

#[test]
fn the_seed_pascal_card_offloads_more_layers_with_a_quantized_cache() {
    let card = p4000();
    let f16 = on(&card, &long_context("f16"));
    let q8 = on(&card, &long_context("q8_0"));
    let q4 = on(&card, &long_context("q4_0"));
    assert!(f16.flash_attention && q8.flash_attention && q4.flash_attention);
    assert!(
        layers(&f16) < layers(&q8) && layers(&q8) < layers(&q4),
        "f16 {}, q8_0 {}, q4_0 {}",
        layers(&f16),
        layers(&q8),
        layers(&q4)
    );
    // q4_0 takes the whole model: 32 blocks and the output layer.
    assert_eq!(layers(&q4), 33);
    // Left to choose, the planner takes the best cache that offloads everything.
    let auto = on(
        &card,
        &job(
            "{model: {preset: mistral-7b-instruct-v0.3-q4_k_m}, runtime: llamacpp, image: x, contextLength: 32768}",
        ),
    );
    let l = auto.llama_cpp.unwrap();
    assert_eq!((l.kv_cache_type, l.gpu_layers), (KvCacheType::Q4_0, 33));
    for p in [&f16, &q8, &q4] {
        assert!(p.memory.needed_per_gpu_mib <= p.memory.usable_per_gpu_mib);
    }
}

#[test]
fn every_kv_cache_type_runs_with_flash_attention_on_pascal_volta_and_turing() {
    let cards = [p4000(), class("v100-16gb-x4"), class("t4-x1")];
    for card in &cards {
        for kv in ["f16", "q8_0", "q4_0"] {
            let j = long_context(kv);
            let p = on(card, &j);
            assert!(p.flash_attention, "{} {kv}: {:?}", card.name, p.reasons);
            assert_eq!(p.llama_cpp.unwrap().kv_cache_type.as_str(), kv);
            let args = workload::runtime_args(&j, &p);
            for flag in ["--cache-type-k", "--cache-type-v"] {
                let at = args.iter().position(|a| a == flag).expect(flag);
                assert_eq!(args[at + 1], kv, "{} {flag}", card.name);
            }
            let at = args.iter().position(|a| a == "--flash-attn").unwrap();
            assert_eq!(args[at + 1], "on");
            let at = args.iter().position(|a| a == "--n-gpu-layers").unwrap();
            assert_eq!(args[at + 1], layers(&p).to_string(), "flag and plan agree");
        }
    }
}

#[test]
fn below_pascal_llamacpp_has_no_flash_attention_and_keeps_f16() {
    let maxwell = NodeClass::new(
        "m40-x1",
        "Tesla M40 24GB",
        1,
        22_945,
        Some(ComputeCapability::new(5, 2)),
    );
    let p = on(
        &maxwell,
        &job(
            "{model: {preset: mistral-7b-instruct-v0.3-q4_k_m}, runtime: llamacpp, image: x, contextLength: 32768}",
        ),
    );
    assert!(!p.flash_attention);
    assert_eq!(p.llama_cpp.unwrap().kv_cache_type, KvCacheType::F16);
}

#[test]
fn full_offload_counts_the_output_layer_and_partial_counts_do_not_exceed_the_blocks() {
    let j = job(
        "{model: {preset: llama-3.1-70b-instruct-q4_k_m}, runtime: llamacpp, image: x, contextLength: 32768}",
    );
    let h100 =
        vramfit_planner::plan_for_class(&j, &class("h100-80gb-x8"), &Fallback::default()).unwrap();
    let l = h100.llama_cpp.unwrap();
    assert_eq!((l.gpu_layers, l.total_layers), (81, 81));
    let l40s = on(&class("l40s-x1"), &j).llama_cpp.unwrap();
    assert!(
        l40s.gpu_layers <= 80,
        "a partial count is blocks only: {l40s:?}"
    );
    assert_eq!(l40s.total_layers, 81);
}

#[test]
fn a_llamacpp_server_gets_only_the_plans_description_as_env() {
    let j = long_context("q8_0");
    let p = on(&p4000(), &j);
    let env = workload::plan_env(&j, &p);
    let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
    assert!(names.iter().all(|n| n.starts_with("VRAMFIT_")), "{names:?}");
    // What llama.cpp does not read is not handed to it: no dtype, quantization or PyTorch
    // memory fraction (the class's 0.90 while the plan's budget is 80 % would contradict it).
    for absent in [
        "VRAMFIT_DTYPE",
        "VRAMFIT_QUANTIZATION",
        "VRAMFIT_MEMORY_FRACTION",
    ] {
        assert!(!names.contains(&absent), "{absent} in {names:?}");
    }
    let layers_env = env
        .iter()
        .find(|(k, _)| k == "VRAMFIT_LLAMACPP_GPU_LAYERS")
        .map(|(_, v)| v.clone());
    assert_eq!(layers_env, Some(layers(&p).to_string()));
}

#[test]
fn a_partial_offload_asks_host_memory_for_what_stays_on_the_cpu() {
    let card = p4000();
    let f16 = long_context("f16");
    let partial = on(&card, &f16);
    let host = workload::host_memory_mib(&f16, &partial).expect("layers on the CPU");
    let file_mib = 4_372_812_000u64.div_ceil(1024 * 1024);
    // 32 blocks, some on the CPU, each with 128 MiB of f16 KV cache at 32k tokens.
    let on_cpu = u64::from(32 - layers(&partial));
    assert!(on_cpu > 0);
    assert!(host >= file_mib + on_cpu * 128, "{host} MiB");
    assert!(
        partial.reasons.iter().any(|r| r.starts_with("host memory")),
        "{:?}",
        partial.reasons
    );
    let q8 = long_context("q8_0");
    let fewer_on_cpu = workload::host_memory_mib(&q8, &on(&card, &q8)).unwrap();
    assert!(fewer_on_cpu < host, "{fewer_on_cpu} vs {host}");
    let q4 = long_context("q4_0");
    assert_eq!(
        workload::host_memory_mib(&q4, &on(&card, &q4)),
        None,
        "all offloaded"
    );
}

/// Every GGUF preset on every built-in class: the plan's memory fraction is its budget's share
/// of VRAM, USABLE/GPU is that share, NEED/GPU (layers, KV cache, llama.cpp's overhead) fits
/// it, and the reason names the same budget. One set of figures per plan.
#[test]
fn a_llamacpp_plan_states_one_budget() {
    let mut checked = 0;
    for preset in vramfit_planner::model_catalog::PRESETS
        .iter()
        .filter(|p| p.shape.gguf_file_bytes.is_some())
    {
        for context in [4096, 32768] {
            let j = job(&format!(
                "{{model: {{preset: {}}}, runtime: llamacpp, image: x, contextLength: {context}}}",
                preset.key
            ));
            for class in vramfit_planner::builtin_classes() {
                let Ok(p) = plan_for_class(&j, &class, &Fallback::default()) else {
                    continue;
                };
                let m = p.memory;
                assert_eq!(p.memory_fraction_percent, j.target_usage_percent);
                assert_eq!(
                    m.usable_per_gpu_mib,
                    m.vram_per_gpu_mib * u64::from(p.memory_fraction_percent) / 100,
                    "{} on {}",
                    preset.key,
                    class.name
                );
                assert!(
                    m.needed_per_gpu_mib <= m.usable_per_gpu_mib,
                    "{} on {}: needs {} of {} MiB",
                    preset.key,
                    class.name,
                    m.needed_per_gpu_mib,
                    m.usable_per_gpu_mib
                );
                let budget = format!(
                    "budget {} per GPU ({}% of {})",
                    vramfit_planner::gib(m.usable_per_gpu_mib),
                    p.memory_fraction_percent,
                    vramfit_planner::gib(m.vram_per_gpu_mib)
                );
                assert!(
                    p.reasons.iter().any(|r| r.contains(&budget)),
                    "{budget:?} not in {:?}",
                    p.reasons
                );
                checked += 1;
            }
        }
    }
    assert!(checked > 20, "{checked} plans checked");
}

/// A 4166.1 MiB Q4_K_M GGUF given by its numbers alone (32 blocks, hidden 4096, KV heads
/// unknown so counted as the hidden size, no layout) at a 32k context on an 8 GB card at 80 %:
/// 6553 MiB usable, 6053 of it for layers after llama.cpp's 500 MiB. A layer is an even share
/// of the file (4166.1 ÷ 32 = 130.2 MiB) and its KV cache (2 × 32768 × 4096 elements: 272 MiB
/// in q8_0, 144 MiB in q4_0). `--n-gpu-layers n` puts n of llama.cpp's layers on the GPU (the
/// last n blocks, or from llama.cpp PR 18148 the output layer and the last n − 1 blocks),
/// never n blocks and the output layer: 15 layers take 1953 + 4080 = 6033 MiB in q8_0, 22
/// take 2865 + 3168 = 6033 in q4_0; one more overflows either.
#[test]
fn a_gguf_by_its_numbers_offloads_every_layer_that_fits_an_8_gb_card() {
    let card = NodeClass::new(
        "8gb-x1",
        "Quadro P4000",
        1,
        8_192,
        Some(ComputeCapability::new(6, 1)),
    );
    let numbers = |kv: &str| {
        job(&format!(
            "{{model: {{parameters: 7241732096, layers: 32, hiddenSize: 4096, attentionHeads: 32, \
             ggufFileBytes: 4368476570}}, runtime: llamacpp, image: x, contextLength: 32768, \
             llamaCpp: {{kvCacheTypes: [{kv}]}}}}"
        ))
    };
    for (kv, expected, weights_mib, kv_mib) in
        [("q8_0", 15, 1953, 15 * 272), ("q4_0", 22, 2865, 22 * 144)]
    {
        let p = on(&card, &numbers(kv));
        let m = p.memory;
        assert_eq!(
            (layers(&p), m.weights_mib, m.kv_cache_mib),
            (expected, weights_mib, kv_mib),
            "{kv}: {:?}",
            p.reasons
        );
        assert_eq!(m.usable_per_gpu_mib, 6553);
        assert_eq!(m.needed_per_gpu_mib, weights_mib + kv_mib + 500);
        assert!(m.needed_per_gpu_mib <= m.usable_per_gpu_mib);
        // One layer more would not fit: an even share (131 MiB) and its KV cache.
        let one_more = m.needed_per_gpu_mib + 131 + if kv == "q8_0" { 272 } else { 144 };
        assert!(one_more > m.usable_per_gpu_mib, "{kv}: {one_more}");
        // Host memory: the file and the KV cache of 33 - n blocks, the most a build leaves on
        // the CPU (from PR 18148 on, the output layer is one of the n).
        let kv_bytes: u64 = if kv == "q8_0" { 272 } else { 144 } << 20;
        let on_cpu = u64::from(33 - layers(&p));
        let host = workload::host_memory_mib(&numbers(kv), &p).expect("a partial offload");
        assert_eq!(
            host,
            (4_368_476_570 + on_cpu * kv_bytes).div_ceil(1 << 20) + 1024,
            "{kv}"
        );
    }
}
