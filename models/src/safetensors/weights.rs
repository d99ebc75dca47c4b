//! A checkpoint's weights from its safetensors files: exact sums from the headers, else the
//! index's `metadata.total_size`, with notes where the index and the headers disagree.
use super::header::Sums;
use super::index::Index;
use crate::facts::{Checkpoint, Fact, Weights};

/// The checkpoint with the exact tensor bytes summed from its headers (`files` says which),
/// and, for a checkpoint that is not pre-quantized (whose packed integers are not
/// parameters), its exact parameter count.
pub fn apply_headers(checkpoint: &mut Checkpoint, sums: &Sums, files: &str) {
    checkpoint.weights = Some(Weights {
        bytes: Fact::derived(sums.bytes, format!("summed from {files}")),
        by_dtype: sums
            .by_dtype
            .iter()
            .map(|(dtype, bytes)| (dtype.to_string(), *bytes))
            .collect(),
        tensors: sums.tensors,
    });
    if checkpoint.quantization.is_none() {
        checkpoint.parameters = Some(Fact::derived(
            sums.elements,
            format!("tensor elements summed from {files}"),
        ));
    }
}

/// Where the headers and the index `file` disagree: tensors of the headers the weight map puts
/// elsewhere (`skipped`), tensors it names that no header holds, a `metadata.total_size` other
/// than the sum.
pub fn index_notes(index: &Index, sums: &Sums, skipped: u64, file: &str) -> Vec<String> {
    let mut notes = Vec::new();
    if skipped > 0 {
        notes.push(format!(
            "safetensors headers: {} not counted, since {file}'s weight_map puts each in another file or does not name it",
            tensors(skipped)
        ));
    }
    let unclaimed = index.unclaimed();
    if unclaimed > 0 {
        notes.push(format!(
            "{file}: {unclaimed} of the {} it names {} not in the header of the file its weight_map puts {} in: the weights summed may be short",
            tensors(index.tensors),
            if unclaimed == 1 { "is" } else { "are" },
            if unclaimed == 1 { "it" } else { "them" },
        ));
    }
    if let Some(total) = index.total_size.filter(|&t| t != sums.bytes) {
        notes.push(format!(
            "{file} metadata.total_size is {total} bytes, the headers' tensors sum to {}: the sum is used",
            sums.bytes
        ));
    }
    notes
}

fn tensors(n: u64) -> String {
    match n {
        1 => "1 tensor".to_string(),
        n => format!("{n} tensors"),
    }
}

/// The checkpoint with the index's `metadata.total_size` as its weight bytes, where the headers
/// were not read (`why` says why, where it is not that the files are absent); without a
/// `total_size`, the weights stay unknown and the parameters those counted from `config.json`.
pub fn apply_index(checkpoint: &mut Checkpoint, index: &Index, file: &str, why: Option<&str>) {
    match (index.total_size, why) {
        (Some(total), None) => {
            checkpoint.weights = Some(Weights {
                bytes: Fact::key(total, file, "metadata.total_size"),
                by_dtype: Default::default(),
                tensors: index.tensors,
            });
        }
        (Some(total), Some(why)) => {
            checkpoint.weights = Some(Weights {
                bytes: Fact::derived(total, format!("{file} metadata.total_size ({why})")),
                by_dtype: Default::default(),
                tensors: index.tensors,
            });
        }
        (None, Some(why)) => checkpoint.notes.push(format!(
            "no weight bytes: {why}, and {file} gives no metadata.total_size"
        )),
        (None, None) => {}
    }
}
