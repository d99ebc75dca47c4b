//! ggml tensor types: elements per block and bytes per block, as llama.cpp's
//! `gguf-py/gguf/constants.py` (`GGML_QUANT_SIZES`) and `ggml.c` (`type_traits`) give them,
//! and llama.cpp's file-type names (`general.file_type`, `llama_ftype` in `llama.h`).

/// A tensor type: its name, elements per block, bytes per block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GgmlType {
    /// The type's id in the file.
    pub id: u32,
    /// Its name (`Q4_K`).
    pub name: &'static str,
    /// Elements per block.
    pub block: u64,
    /// Bytes per block.
    pub block_bytes: u64,
}

const fn t(id: u32, name: &'static str, block: u64, block_bytes: u64) -> GgmlType {
    GgmlType {
        id,
        name,
        block,
        block_bytes,
    }
}

/// Every type llama.cpp writes (ids 4, 5 and 31–33, 36–38 were removed and are refused).
const TYPES: &[GgmlType] = &[
    t(0, "F32", 1, 4),
    t(1, "F16", 1, 2),
    t(2, "Q4_0", 32, 18),
    t(3, "Q4_1", 32, 20),
    t(6, "Q5_0", 32, 22),
    t(7, "Q5_1", 32, 24),
    t(8, "Q8_0", 32, 34),
    t(9, "Q8_1", 32, 40),
    t(10, "Q2_K", 256, 84),
    t(11, "Q3_K", 256, 110),
    t(12, "Q4_K", 256, 144),
    t(13, "Q5_K", 256, 176),
    t(14, "Q6_K", 256, 210),
    t(15, "Q8_K", 256, 292),
    t(16, "IQ2_XXS", 256, 66),
    t(17, "IQ2_XS", 256, 74),
    t(18, "IQ3_XXS", 256, 98),
    t(19, "IQ1_S", 256, 50),
    t(20, "IQ4_NL", 32, 18),
    t(21, "IQ3_S", 256, 110),
    t(22, "IQ2_S", 256, 82),
    t(23, "IQ4_XS", 256, 136),
    t(24, "I8", 1, 1),
    t(25, "I16", 1, 2),
    t(26, "I32", 1, 4),
    t(27, "I64", 1, 8),
    t(28, "F64", 1, 8),
    t(29, "IQ1_M", 256, 56),
    t(30, "BF16", 1, 2),
    t(34, "TQ1_0", 256, 54),
    t(35, "TQ2_0", 256, 66),
    t(39, "MXFP4", 32, 17),
    t(40, "NVFP4", 64, 36),
    t(41, "Q1_0", 128, 18),
];

/// The type with this id.
pub fn ggml_type(id: u32) -> Option<GgmlType> {
    TYPES.iter().copied().find(|t| t.id == id)
}

/// llama.cpp's name for a `general.file_type` (`llama_ftype`).
pub fn file_type_name(id: u64) -> Option<&'static str> {
    Some(match id {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        19 => "IQ2_XXS",
        20 => "IQ2_XS",
        21 => "Q2_K_S",
        22 => "IQ3_XS",
        23 => "IQ3_XXS",
        24 => "IQ1_S",
        25 => "IQ4_NL",
        26 => "IQ3_S",
        27 => "IQ3_M",
        28 => "IQ2_S",
        29 => "IQ2_M",
        30 => "IQ4_XS",
        31 => "IQ1_M",
        32 => "BF16",
        36 => "TQ1_0",
        37 => "TQ2_0",
        38 => "MXFP4_MOE",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k_quants_cost_what_their_bits_per_weight_say() {
        // Q4_K: 4.5 bits per weight; Q6_K: 6.5625; Q8_0: 8.5.
        let bpw = |name: &str| {
            let t = TYPES.iter().find(|t| t.name == name).unwrap();
            t.block_bytes as f64 * 8.0 / t.block as f64
        };
        assert_eq!(bpw("Q4_K"), 4.5);
        assert_eq!(bpw("Q6_K"), 6.5625);
        assert_eq!(bpw("Q8_0"), 8.5);
        assert_eq!(bpw("F16"), 16.0);
        assert!(ggml_type(4).is_none(), "Q4_2 was removed");
        let mut ids: Vec<u32> = TYPES.iter().map(|t| t.id).collect();
        ids.dedup();
        assert_eq!(ids.len(), TYPES.len());
    }
}
