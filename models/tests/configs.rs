//! The published `config.json` files in `testdata/configs` (origins in testdata/SOURCES.md)
//! read into the numbers their model cards and safetensors headers give.
// Test code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
use vramfit_models::facts::QuantMethod;
use vramfit_models::hf::read_config;
use vramfit_models::{Checkpoint, Origin};

fn config(repo: &str) -> Checkpoint {
    let path = format!(
        "{}/testdata/configs/{repo}/config.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap();
    read_config(&text, "config.json").unwrap_or_else(|e| panic!("{repo}: {e}"))
}

/// (layers, hidden, heads, KV heads, head dim, context, vocab)
fn numbers(c: &Checkpoint) -> (u32, u32, u32, u32, u32, Option<u32>, Option<u32>) {
    (
        c.layers.value,
        c.hidden_size.value,
        c.attention_heads.value,
        c.kv_heads.value,
        c.head_dim.value,
        c.context_limit.as_ref().map(|f| f.value),
        c.vocab_size.as_ref().map(|f| f.value),
    )
}

fn parameters(c: &Checkpoint) -> u64 {
    c.parameters.as_ref().unwrap().value
}

#[test]
fn dense_models_count_their_published_parameters_exactly() {
    // Totals as the models' safetensors headers give them (the Hub's parameter counts).
    for (repo, expected) in [
        ("meta-llama/Llama-3.1-8B-Instruct", 8_030_261_248),
        ("meta-llama/Llama-3.1-70B-Instruct", 70_553_706_496),
        ("meta-llama/Llama-3.2-1B-Instruct", 1_235_814_400),
        ("meta-llama/Llama-3.2-3B-Instruct", 3_212_749_824),
        ("mistralai/Mistral-7B-Instruct-v0.3", 7_248_023_552),
        ("Qwen/Qwen2.5-7B-Instruct", 7_615_616_512),
        ("Qwen/Qwen3-4B", 4_022_468_096),
        ("Qwen/Qwen3-8B", 8_190_735_360),
        ("Qwen/Qwen3-14B", 14_768_307_200),
        ("Qwen/Qwen3-32B", 32_762_123_264),
        ("microsoft/phi-4", 14_659_507_200),
    ] {
        let c = config(repo);
        assert_eq!(parameters(&c), expected, "{repo}");
        let linear = c.linear_parameters.as_ref().unwrap().value;
        let embeddings =
            u64::from(c.vocab_size.as_ref().unwrap().value) * u64::from(c.hidden_size.value);
        assert!(
            linear < expected - embeddings,
            "{repo}: linear layers exclude the embeddings"
        );
        assert!(c.experts.is_none() && c.vision.is_none(), "{repo}");
        assert!(c.quantization.is_none(), "{repo}");
    }
}

#[test]
fn every_number_says_where_it_was_read_from() {
    let c = config("Qwen/Qwen3-8B");
    assert_eq!(
        numbers(&c),
        (36, 4096, 32, 8, 128, Some(40_960), Some(151_936))
    );
    assert_eq!(c.layers.from.to_string(), "config.json num_hidden_layers");
    assert_eq!(
        c.kv_heads.from.to_string(),
        "config.json num_key_value_heads"
    );
    assert_eq!(c.head_dim.from.to_string(), "config.json head_dim");
    assert_eq!(c.architecture.value, "Qwen3ForCausalLM");
    assert_eq!(c.dtype.as_ref().unwrap().value, "bfloat16");
    assert!(
        c.parameters
            .as_ref()
            .unwrap()
            .from
            .to_string()
            .starts_with("counted from config.json: the qwen3 layout"),
        "{}",
        c.parameters.as_ref().unwrap().from
    );
    // Without head_dim, one head is hidden / heads.
    let llama = config("meta-llama/Llama-3.1-8B-Instruct");
    assert_eq!(llama.head_dim.value, 128);
    assert!(matches!(llama.head_dim.from, Origin::Derived(_)));
    // A config written out by transformers with every default (and its keys in another
    // order) reads the same.
    let mistral = config("mistralai/Mistral-7B-Instruct-v0.3");
    assert_eq!(
        numbers(&mistral),
        (32, 4096, 32, 8, 128, Some(32_768), Some(32_768))
    );
}

#[test]
fn vision_language_models_read_their_text_model_and_count_the_tower() {
    // Gemma 3 4B leaves heads, KV heads, head_dim, vocabulary and context to the defaults of
    // transformers' Gemma3TextConfig; hidden size is not heads × head_dim.
    let gemma4b = config("google/gemma-3-4b-it");
    assert_eq!(
        numbers(&gemma4b),
        (34, 2560, 8, 4, 256, Some(131_072), Some(262_208))
    );
    assert_eq!(
        gemma4b.attention_heads.from.to_string(),
        "config.json: text_config.num_attention_heads absent, the default of transformers 4.50 Gemma3TextConfig"
    );
    assert_eq!(
        gemma4b.layers.from.to_string(),
        "config.json text_config.num_hidden_layers"
    );
    assert_eq!(
        gemma4b.vision.as_ref().unwrap().value,
        "siglip_vision_model"
    );
    assert_eq!(parameters(&gemma4b), 4_300_079_472);
    assert!(
        gemma4b.notes.iter().any(|n| n.contains("sliding-window")),
        "{:?}",
        gemma4b.notes
    );

    let gemma27b = config("google/gemma-3-27b-it");
    assert_eq!(
        numbers(&gemma27b),
        (62, 5376, 32, 16, 128, Some(131_072), Some(262_208))
    );
    assert_eq!(parameters(&gemma27b), 27_432_406_640);

    // Qwen2.5-VL (as first published) keeps the text model at the top level.
    let qwen_vl = config("Qwen/Qwen2.5-VL-7B-Instruct");
    assert_eq!(
        numbers(&qwen_vl),
        (28, 3584, 28, 4, 128, Some(128_000), Some(152_064))
    );
    assert_eq!(qwen_vl.vision.as_ref().unwrap().value, "qwen2_5_vl");
    assert_eq!(parameters(&qwen_vl), 8_292_166_656);

    // Llama-3.2-Vision: 100 layers of which 20 cross-attend to the image.
    let mllama = config("meta-llama/Llama-3.2-90B-Vision-Instruct");
    assert_eq!(
        numbers(&mllama),
        (100, 8192, 64, 8, 128, Some(131_072), Some(128_256))
    );
    assert_eq!(mllama.cross_attention_layers.as_ref().unwrap().value, 20);
    assert_eq!(mllama.vision.as_ref().unwrap().value, "mllama_vision_model");
    assert_eq!(parameters(&mllama), 88_593_355_323);
}

#[test]
fn moe_models_count_every_expert_and_the_active_ones() {
    let mixtral = config("mistralai/Mixtral-8x7B-v0.1");
    let experts = mixtral.experts.as_ref().unwrap();
    assert_eq!((experts.routed.value, experts.per_token.value), (8, 2));
    assert_eq!(
        experts.routed.from.to_string(),
        "config.json num_local_experts"
    );
    assert_eq!(parameters(&mixtral), 46_702_792_704);
    // Everything but the embeddings, the output layer, norms and routers.
    assert_eq!(
        mixtral.linear_parameters.as_ref().unwrap().value,
        46_702_792_704 - 2 * 32_000 * 4096 - 32 * (2 * 4096 + 8 * 4096) - 4096
    );
    // 46.7B less six of eight experts (3 × 4096 × 14336 each) in each of 32 layers.
    assert_eq!(
        mixtral.active_parameters.as_ref().unwrap().value,
        12_879_925_248
    );

    let qwen = config("Qwen/Qwen3-30B-A3B");
    let experts = qwen.experts.as_ref().unwrap();
    assert_eq!((experts.routed.value, experts.per_token.value), (128, 8));
    assert_eq!(
        experts.expert_intermediate_size.as_ref().unwrap().value,
        768
    );
    assert_eq!(parameters(&qwen), 30_532_122_624);
    assert_eq!(
        qwen.active_parameters.as_ref().unwrap().value,
        3_353_032_704
    );
}

#[test]
fn deepseek_v3_is_moe_with_latent_attention_and_fp8_weights() {
    let c = config("deepseek-ai/DeepSeek-V3");
    let experts = c.experts.as_ref().unwrap();
    assert_eq!(
        (
            experts.routed.value,
            experts.per_token.value,
            experts.shared.as_ref().unwrap().value
        ),
        (256, 8, 1)
    );
    assert_eq!(
        experts.routed.from.to_string(),
        "config.json n_routed_experts"
    );
    let latent = c.latent_attention.as_ref().unwrap();
    assert_eq!(
        (latent.kv_lora_rank.value, latent.rope_head_dim.value),
        (512, 64)
    );
    assert_eq!(latent.cached_width(), 576);
    assert_eq!(c.head_dim.value, 192);
    // 671B without the multi-token-prediction layer the checkpoint also ships.
    assert_eq!(parameters(&c), 671_026_419_200);
    assert!(c.active_parameters.as_ref().unwrap().value / 1_000_000_000 == 37);
    let q = c.quantization.as_ref().unwrap();
    assert_eq!((&q.method, q.weight_bits), (&QuantMethod::Fp8, Some(8)));
}

/// A published config with `key` set to `value`.
fn edited(repo: &str, section: Option<&str>, key: &str, value: serde_json::Value) -> String {
    let path = format!(
        "{}/testdata/configs/{repo}/config.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let object = match section {
        Some(section) => &mut json[section],
        None => &mut json,
    };
    object[key] = value;
    json.to_string()
}

#[test]
fn per_layer_lists_are_bounded_by_the_layer_count() {
    // Two dense layers (one given twice) of Qwen3-30B-A3B's 48: each trades its 128 experts
    // and router for a dense MLP of intermediate_size.
    let text = edited(
        "Qwen/Qwen3-30B-A3B",
        None,
        "mlp_only_layers",
        serde_json::json!([0, 2, 0]),
    );
    let qwen = read_config(&text, "config.json").unwrap();
    let moe_mlp = 128 * 3 * 2048 * 768 + 128 * 2048;
    let dense_mlp = 3 * 2048 * 6144;
    assert_eq!(
        parameters(&qwen),
        30_532_122_624 - 2 * moe_mlp + 2 * dense_mlp
    );

    // A list longer than the model's layers (a config of zeros to the size bound) is refused
    // before its items are read, let alone once per layer.
    let zeros = serde_json::Value::Array(vec![serde_json::json!(0); 512 * 1024 - 1024]);
    let text = edited("Qwen/Qwen3-30B-A3B", None, "mlp_only_layers", zeros);
    assert!(
        text.len() as u64 <= vramfit_models::limits::CONFIG_JSON.value,
        "{}",
        text.len()
    );
    assert_eq!(
        read_config(&text, "config.json").unwrap_err().to_string(),
        "config.json: mlp_only_layers is a list of 523264 items, expected at most one per layer (48)"
    );

    let text = edited(
        "meta-llama/Llama-3.2-90B-Vision-Instruct",
        Some("text_config"),
        "cross_attention_layers",
        serde_json::Value::Array(vec![serde_json::json!(3); 101]),
    );
    assert_eq!(
        read_config(&text, "config.json").unwrap_err().to_string(),
        "config.json: text_config.cross_attention_layers is a list of 101 items, expected at most one per layer (100)"
    );
}
