//! `quantization_config` (or the older `compression_config` of compressed-tensors
//! checkpoints, which vLLM also reads) of a pre-quantized checkpoint.
use serde_json::Value;

use crate::error::ModelFileError;
use crate::facts::{Origin, PreQuantized, QuantMethod};
use crate::hf::keys::Section;

/// The checkpoint's quantization, if it has one.
pub(crate) fn read(root: &Section<'_>) -> Result<Option<PreQuantized>, ModelFileError> {
    let Some((q, key)) = ["quantization_config", "compression_config"]
        .iter()
        .find_map(|key| root.get(key).map(|value| (value, *key)))
    else {
        return Ok(None);
    };
    let prefix = format!("{key}.");
    let map = q.as_object().ok_or_else(|| root.bad(key, q, "an object"))?;
    let q = Section {
        file: root.file,
        prefix: &prefix,
        map,
    };
    let method_name = q.string("quant_method")?.unwrap_or("").to_ascii_lowercase();
    let from = Origin::Key {
        file: root.file.to_string(),
        key: q.dotted("quant_method"),
    };
    let bits = |keys: &[&str]| -> Result<Option<u8>, ModelFileError> {
        Ok(q.integer(keys)?.and_then(|f| u8::try_from(f.value).ok()))
    };
    // `group_size: -1` (GPTQ) is one scale per output channel: no groups.
    let group = |keys: &[&str]| -> Result<Option<u32>, ModelFileError> {
        match keys.iter().find_map(|k| q.get(k)) {
            Some(v) if v.as_i64() == Some(-1) => Ok(None),
            _ => Ok(q.integer(keys)?.and_then(|f| u32::try_from(f.value).ok())),
        }
    };
    let quantized = match method_name.as_str() {
        "awq" => PreQuantized {
            method: QuantMethod::Awq,
            weight_bits: bits(&["bits", "w_bit"])?,
            activation_bits: None,
            group_size: group(&["group_size", "q_group_size"])?,
            weight_format: Some("int".into()),
            symmetric: q.flag("zero_point")?.map(|zero_point| !zero_point),
            from,
        },
        "gptq" => PreQuantized {
            method: QuantMethod::Gptq,
            weight_bits: bits(&["bits"])?,
            activation_bits: None,
            group_size: group(&["group_size"])?,
            weight_format: Some("int".into()),
            symmetric: q.flag("sym")?,
            from,
        },
        "fp8" | "fbgemm_fp8" => PreQuantized {
            method: QuantMethod::Fp8,
            weight_bits: Some(8),
            activation_bits: match q.string("activation_scheme")? {
                Some("dynamic") | Some("static") | None => Some(8),
                Some(_) => None,
            },
            group_size: None,
            weight_format: Some("float".into()),
            symmetric: Some(true),
            from,
        },
        "compressed-tensors" => compressed_tensors(&q, from)?,
        "bitsandbytes" => {
            let four = q.flag("load_in_4bit")?.unwrap_or(false);
            let eight = q.flag("load_in_8bit")?.unwrap_or(false);
            PreQuantized {
                method: QuantMethod::Bitsandbytes,
                weight_bits: if four {
                    Some(4)
                } else if eight {
                    Some(8)
                } else {
                    None
                },
                activation_bits: None,
                group_size: four.then_some(64),
                weight_format: q
                    .string("bnb_4bit_quant_type")?
                    .filter(|_| four)
                    .map(str::to_string)
                    .or(eight.then(|| "int".to_string())),
                symmetric: None,
                from,
            }
        }
        "" => {
            return Err(ModelFileError::Missing {
                file: root.file.to_string(),
                what: "quantization method",
                keys: q.dotted("quant_method"),
            });
        }
        other => PreQuantized {
            method: QuantMethod::Other(other.to_string()),
            weight_bits: bits(&["bits", "w_bit", "nbits"])?,
            activation_bits: None,
            group_size: group(&["group_size"])?,
            weight_format: None,
            symmetric: None,
            from,
        },
    };
    Ok(Some(quantized))
}

/// compressed-tensors: the weights and input activations of the scheme that targets `Linear`
/// layers (the first group, when several do).
fn compressed_tensors(q: &Section<'_>, from: Origin) -> Result<PreQuantized, ModelFileError> {
    let groups = q
        .get("config_groups")
        .and_then(Value::as_object)
        .ok_or_else(|| ModelFileError::Missing {
            file: q.file.to_string(),
            what: "compressed-tensors scheme",
            keys: q.dotted("config_groups"),
        })?;
    let linear = groups
        .values()
        .filter_map(Value::as_object)
        .find(|g| {
            g.get("targets")
                .and_then(Value::as_array)
                .is_some_and(|t| t.iter().any(|x| x.as_str() == Some("Linear")))
        })
        .or_else(|| groups.values().find_map(Value::as_object));
    let field = |part: &str, key: &str| {
        linear
            .and_then(|g| g.get(part))
            .and_then(Value::as_object)
            .and_then(|o| o.get(key))
            .cloned()
    };
    let bits = |part| {
        field(part, "num_bits")
            .and_then(|v| v.as_u64())
            .and_then(|b| u8::try_from(b).ok())
    };
    Ok(PreQuantized {
        method: QuantMethod::CompressedTensors,
        weight_bits: bits("weights"),
        activation_bits: bits("input_activations"),
        group_size: field("weights", "group_size")
            .and_then(|v| v.as_u64())
            .and_then(|g| u32::try_from(g).ok()),
        weight_format: field("weights", "type").and_then(|v| v.as_str().map(str::to_string)),
        symmetric: field("weights", "symmetric").and_then(|v| v.as_bool()),
        from,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn quant(config: Value) -> Option<PreQuantized> {
        let map = config.as_object().unwrap();
        read(&Section {
            file: "config.json",
            prefix: "",
            map,
        })
        .unwrap()
    }

    #[test]
    fn each_method_gives_its_bits_group_and_format() {
        let awq = quant(json!({"quantization_config": {"bits": 4, "group_size": 128,
            "modules_to_not_convert": null, "quant_method": "awq", "version": "gemm",
            "zero_point": true}}))
        .unwrap();
        assert_eq!(
            (awq.method, awq.weight_bits, awq.group_size),
            (QuantMethod::Awq, Some(4), Some(128))
        );
        assert_eq!(
            awq.from.to_string(),
            "config.json quantization_config.quant_method"
        );

        let gptq = quant(json!({"quantization_config": {"bits": 8, "group_size": -1,
            "desc_act": false, "quant_method": "gptq", "sym": true}}))
        .unwrap();
        assert_eq!(
            (gptq.method, gptq.weight_bits, gptq.group_size),
            (QuantMethod::Gptq, Some(8), None),
            "group_size -1 is per channel"
        );
        let fp8 = quant(
            json!({"quantization_config": {"activation_scheme": "dynamic",
            "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}}),
        )
        .unwrap();
        assert_eq!(
            (fp8.method, fp8.weight_bits, fp8.activation_bits),
            (QuantMethod::Fp8, Some(8), Some(8))
        );

        // An FP8 W8A8 checkpoint of llm-compressor, in the older `compression_config` key.
        let w8a8 = quant(
            json!({"compression_config": {"quant_method": "compressed-tensors",
            "format": "float-quantized", "config_groups": {"group_0": {"targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
            "input_activations": {"num_bits": 8, "type": "float", "dynamic": true}}}}}),
        )
        .unwrap();
        assert_eq!(
            (
                w8a8.weight_bits,
                w8a8.activation_bits,
                w8a8.weight_format.as_deref()
            ),
            (Some(8), Some(8), Some("float"))
        );
        assert_eq!(
            w8a8.from.to_string(),
            "config.json compression_config.quant_method"
        );

        let w4a16 = quant(
            json!({"quantization_config": {"quant_method": "compressed-tensors",
            "format": "pack-quantized", "config_groups": {"group_0": {"targets": ["Linear"],
            "weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128},
            "input_activations": null}}}}),
        )
        .unwrap();
        assert_eq!(
            (w4a16.weight_bits, w4a16.activation_bits, w4a16.group_size),
            (Some(4), None, Some(128))
        );

        let nf4 = quant(
            json!({"quantization_config": {"quant_method": "bitsandbytes",
            "load_in_4bit": true, "bnb_4bit_quant_type": "nf4"}}),
        )
        .unwrap();
        assert_eq!(
            (nf4.weight_bits, nf4.weight_format.as_deref()),
            (Some(4), Some("nf4"))
        );
        assert_eq!(quant(json!({"hidden_size": 1})), None);
    }

    #[test]
    fn a_config_without_a_method_is_an_error() {
        let config = json!({"quantization_config": {"bits": 4}});
        let err = read(&Section {
            file: "config.json",
            prefix: "",
            map: config.as_object().unwrap(),
        })
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "config.json: no quantization method (looked for quantization_config.quant_method)"
        );
    }
}
