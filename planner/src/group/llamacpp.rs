//! A llama.cpp group: `llama-server --rpc` on the leader over an `rpc-server` on each worker,
//! every layer on some GPU of the group. It is the alternative to partial offload on one node
//! (layers on the CPU), and taken only where it is faster by the class's numbers: decoding a
//! token reads every weight once, so its time is the bytes on the GPUs over the GPU's memory
//! bandwidth, plus the bytes on the CPU over the host's (partial offload) or plus one network
//! hop per node boundary (RPC).
use vramfit_api::Plan;

use crate::error::PlanError;
use crate::gpu_catalog;
use crate::gpu_catalog::Architecture;
use crate::group::size::{Nodes, group_line};
use crate::memory::MIB;
use crate::node_class::NodeClass;

/// Memory bandwidth llama.cpp's CPU layers are planned to stream at, GB/s: a server's
/// several DDR channels as one decode thread pool reaches them, not the datasheet peak.
pub const HOST_BANDWIDTH_GBPS: u32 = 40;
/// Time one token spends crossing one node boundary of an RPC group, microseconds: llama.cpp's
/// RPC backend sends each device's graph and activations over TCP every token.
pub const RPC_HOP_MICROS: u32 = 2000;

/// The GPU's memory bandwidth in GB/s, from the datasheets (the lower figure where a model
/// comes in several memory versions); an unknown model gets its architecture's lowest.
pub fn gpu_bandwidth_gbps(class: &NodeClass) -> u32 {
    let by_model = gpu_catalog::identify(&class.product).map(|m| match m.name {
        "H200" => 4800,
        "H100" => 2000,
        "A100" => 1555,
        "B200" => 8000,
        "L40S" | "L40" => 864,
        "RTX A6000" => 768,
        "A10G" | "A10" => 600,
        "A30" => 933,
        "L4" => 300,
        "RTX 3090" => 936,
        "RTX 4090" => 1008,
        "RTX 5090" => 1792,
        "V100" => 900,
        "P100" => 732,
        "T4" => 320,
        _ => 0,
    });
    by_model
        .filter(|&b| b > 0)
        .unwrap_or(match Architecture::from_capability(class.capability) {
            // The Quadro P4000, the smallest Pascal card the teams ran.
            Architecture::Pascal => 243,
            Architecture::Volta => 900,
            Architecture::Turing => 320,
            Architecture::Ampere => 600,
            Architecture::Ada => 300,
            Architecture::Hopper => 2000,
            Architecture::Blackwell => 1792,
            Architecture::Unknown => 200,
        })
}

/// Decode speed, tokens per second of one sequence, for `gpu_bytes` on GPUs of `gpu_gbps`,
/// `cpu_bytes` in host memory and `hops` node boundaries.
pub fn tokens_per_second(gpu_bytes: u64, gpu_gbps: u32, cpu_bytes: u64, hops: u32) -> f64 {
    let seconds = gpu_bytes as f64 / (f64::from(gpu_gbps.max(1)) * 1e9)
        + cpu_bytes as f64 / (f64::from(HOST_BANDWIDTH_GBPS) * 1e9)
        + f64::from(hops) * f64::from(RPC_HOP_MICROS) / 1e6;
    if seconds > 0.0 { 1.0 / seconds } else { 0.0 }
}

/// A llama.cpp plan's decode speed: its weights on the GPUs, the rest of the GGUF file on the
/// CPU, `nodes - 1` hops.
fn speed(nodes: &Nodes, plan: &Plan) -> f64 {
    let file = nodes.job.model.gguf_file_bytes.unwrap_or(0);
    let on_gpus = plan
        .memory
        .weights_mib
        .saturating_mul(MIB)
        .saturating_mul(u64::from(plan.total_gpus()))
        .min(file);
    tokens_per_second(
        on_gpus,
        gpu_bandwidth_gbps(nodes.class),
        file.saturating_sub(on_gpus),
        plan.nodes().saturating_sub(1),
    )
}

/// Whether every layer of `plan` is on a GPU.
fn all_layers(plan: &Plan) -> bool {
    plan.llama_cpp
        .is_some_and(|l| l.gpu_layers >= l.total_layers)
}

/// `layers` split over `devices` as evenly as llama.cpp's `--tensor-split` can: the first
/// devices take one more where it does not divide (every GPU of a class has the same budget).
pub fn even_split(layers: u32, devices: u32) -> Vec<u32> {
    let devices = devices.max(1);
    let base = layers.checked_div(devices).unwrap_or(layers);
    let extra = layers.checked_rem(devices).unwrap_or(0);
    (0..devices)
        .map(|d| {
            if d < extra {
                base.saturating_add(1)
            } else {
                base
            }
        })
        .collect()
}

/// The one-node plan where it holds every layer, else the smallest group that does when it is
/// faster than the one-node partial offload (both figures in the reasons).
pub fn plan(nodes: &Nodes) -> Result<Plan, PlanError> {
    let one = (nodes.min <= 1).then(|| nodes.on(1));
    if let Some(Ok(p)) = &one
        && all_layers(p)
    {
        return Ok(p.clone());
    }
    let g = nodes.gpus();
    let total_layers = nodes.job.model.layers.saturating_add(1);
    let mut last_err = None;
    let mut group = None;
    for n in nodes.min.max(2)..=nodes.max {
        // A device with no layer is of no use to the group.
        if g.saturating_mul(n) > total_layers {
            break;
        }
        match nodes.on(n) {
            Ok(p) if all_layers(&p) => {
                group = Some((n, p));
                break;
            }
            Ok(_) => {}
            Err(e) => last_err = Some((n, e)),
        }
    }
    let Some((n, mut grouped)) = group else {
        return match one {
            Some(planned) => planned,
            None => Err(PlanError::GroupDoesNotFit {
                nodes: nodes.max,
                largest: Box::new(
                    last_err
                        .map(|(_, e)| e)
                        .unwrap_or(PlanError::NoQuantizationLeft),
                ),
            }),
        };
    };
    let group_speed = speed(nodes, &grouped);
    let figures = |one: &Plan| {
        let layers = one.llama_cpp.map_or(0, |l| l.gpu_layers);
        format!(
            "about {group_speed:.0} tokens/s with all {total_layers} layers on {n}×{g}×{gpu} over RPC, about {:.0} tokens/s with {layers}/{total_layers} on one node and the rest on the CPU (GPU {} GB/s, host {HOST_BANDWIDTH_GBPS} GB/s, {} ms per node hop)",
            speed(nodes, one),
            gpu_bandwidth_gbps(nodes.class),
            f64::from(RPC_HOP_MICROS) / 1000.0,
            gpu = nodes.class.describe_gpu(),
        )
    };
    let why = match &one {
        Some(Ok(partial)) => {
            if speed(nodes, partial) >= group_speed {
                let mut partial = partial.clone();
                partial.reasons.push(format!(
                    "one node with partial offload, not a group of {n}: {}",
                    figures(&partial)
                ));
                return Ok(partial);
            }
            format!("faster than partial offload: {}", figures(partial))
        }
        Some(Err(e)) => format!("one node cannot hold a layer ({e})"),
        None => "no fewer than after the last out-of-memory failure".to_string(),
    };
    let split = even_split(total_layers, g.saturating_mul(n));
    let layers_per_node: Vec<u32> = split
        .chunks(usize::try_from(g).unwrap_or(1).max(1))
        .map(|c| c.iter().fold(0u32, |a, b| a.saturating_add(*b)))
        .collect();
    if let Some(group) = grouped.group.as_mut() {
        group.tensor_split = split;
        group.layers_per_node = layers_per_node;
        group.why = why;
        let line = group_line(nodes, group);
        grouped.reasons.push(line);
        grouped
            .reasons
            .push(format!("why {n} nodes: {}", group.why));
    }
    Ok(grouped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_split_evenly_leader_first() {
        assert_eq!(even_split(33, 2), vec![17, 16]);
        assert_eq!(even_split(127, 16).iter().sum::<u32>(), 127);
        assert_eq!(even_split(3, 4), vec![1, 1, 1, 0]);
        assert_eq!(even_split(5, 0), vec![5]);
    }

    #[test]
    fn cpu_layers_cost_more_than_a_network_hop() {
        // 4.1 GB on a P4000 (243 GB/s): all on GPUs over 2 nodes vs 14/33 on one.
        let file = 4_100_000_000u64;
        let rpc = tokens_per_second(file, 243, 0, 1);
        let partial = tokens_per_second(file * 14 / 33, 243, file - file * 14 / 33, 0);
        assert!(rpc > 2.0 * partial, "{rpc} vs {partial}");
        assert_eq!(tokens_per_second(0, 0, 0, 0), 0.0);
    }
}
