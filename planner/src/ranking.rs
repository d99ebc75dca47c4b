//! Choosing among the classes that can run a job (docs/planning.md): quality takes the best plan,
//! economy the cheapest that fits. Ties break deterministically by class name.
use std::cmp::Ordering;

use vramfit_api::{Dtype, Plan, Preference};

/// Orders plans best first for a preference.
pub fn compare(preference: Preference, a: &Plan, b: &Plan) -> Ordering {
    let by_name = a.node_class.cmp(&b.node_class);
    match preference {
        Preference::Quality => quality(a, b)
            .then(price(a, b))
            .then(headroom(a, b))
            .then(by_name),
        Preference::Economy => price(a, b)
            .then(quality(a, b))
            .then(headroom(a, b))
            .then(by_name),
    }
}

/// The best plan for a preference, if any.
pub fn best(preference: Preference, plans: &[Plan]) -> Option<&Plan> {
    plans.iter().min_by(|a, b| compare(preference, a, b))
}

/// Better quality first: less quantization, all layers on the GPU, bf16, flash attention,
/// more image tiles, fewer GPUs; among equals, the cheaper, then the roomier.
fn quality(a: &Plan, b: &Plan) -> Ordering {
    let layers = |p: &Plan| {
        p.llama_cpp.map_or(1.0, |l| {
            f64::from(l.gpu_layers) / f64::from(l.total_layers.max(1))
        })
    };
    a.quantization
        .cmp(&b.quantization)
        .then(layers(b).total_cmp(&layers(a)))
        .then(
            a.llama_cpp
                .map(|l| l.kv_cache_type)
                .cmp(&b.llama_cpp.map(|l| l.kv_cache_type)),
        )
        .then((b.dtype == Dtype::Bfloat16).cmp(&(a.dtype == Dtype::Bfloat16)))
        .then(b.flash_attention.cmp(&a.flash_attention))
        .then(b.max_tiles.cmp(&a.max_tiles))
        .then(a.gpu_count.cmp(&b.gpu_count))
}

/// Cheaper first; an unknown price (0) sorts after every known one.
fn price(a: &Plan, b: &Plan) -> Ordering {
    let key = |p: &Plan| {
        if p.hourly_price_cents == 0 {
            u32::MAX
        } else {
            p.hourly_price_cents
        }
    };
    key(a).cmp(&key(b))
}

/// More memory left over per GPU first.
fn headroom(a: &Plan, b: &Plan) -> Ordering {
    let free = |p: &Plan| {
        p.memory
            .usable_per_gpu_mib
            .saturating_sub(p.memory.needed_per_gpu_mib)
    };
    free(b).cmp(&free(a))
}
