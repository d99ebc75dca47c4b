//! `read_checkpoint` over a source held in memory: each tensor counted once, in the shard the
//! index puts it in; an index that names no tensors; the bounds on one read's requests and
//! bytes.
// Test code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
use std::collections::HashMap;
use std::sync::Mutex;

use vramfit_models::limits::{self, Limit};
use vramfit_models::source::{
    FileSource, Range, ReadLimits, SourceError, read_checkpoint, read_checkpoint_with,
};

const CONFIG: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/testdata/configs/meta-llama/Llama-3.2-1B-Instruct/config.json"
);
/// Parameters counted from that config.
const CONFIG_PARAMETERS: u64 = 1_235_814_400;

/// Files in memory; every request is written down.
#[derive(Default)]
struct Memory {
    files: HashMap<String, Vec<u8>>,
    requests: Mutex<Vec<String>>,
}

impl Memory {
    fn with_config() -> Memory {
        let mut memory = Memory::default();
        memory.put("config.json", std::fs::read(CONFIG).unwrap());
        memory
    }

    fn put(&mut self, name: &str, bytes: impl Into<Vec<u8>>) {
        self.files.insert(name.to_string(), bytes.into());
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

impl FileSource for Memory {
    fn describe(&self) -> String {
        "memory".into()
    }

    async fn read_file(&self, name: &str, _: Limit) -> Result<Option<Vec<u8>>, SourceError> {
        self.requests.lock().unwrap().push(name.to_string());
        Ok(self.files.get(name).cloned())
    }

    async fn read_range(
        &self,
        name: &str,
        start: u64,
        len: u64,
    ) -> Result<Option<Range>, SourceError> {
        self.requests
            .lock()
            .unwrap()
            .push(format!("{name} {start}+{len}"));
        Ok(self.files.get(name).map(|file| {
            let from = (start as usize).min(file.len());
            let to = (start.saturating_add(len) as usize).min(file.len());
            Range {
                bytes: file[from..to].to_vec(),
                file_len: Some(file.len() as u64),
            }
        }))
    }
}

/// A safetensors file of U8 tensors, each `(name, bytes)`, with its data.
fn safetensors(tensors: &[(&str, u64)]) -> Vec<u8> {
    let mut offset = 0;
    let entries: Vec<String> = tensors
        .iter()
        .map(|(name, bytes)| {
            let entry = format!(
                r#""{name}":{{"dtype":"U8","shape":[{bytes}],"data_offsets":[{offset},{}]}}"#,
                offset + bytes
            );
            offset += bytes;
            entry
        })
        .collect();
    let header = format!("{{{}}}", entries.join(","));
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend(header.as_bytes());
    file.resize(file.len() + offset as usize, 0);
    file
}

fn index(total_size: Option<u64>, weight_map: &[(&str, &str)]) -> Vec<u8> {
    let map: Vec<String> = weight_map
        .iter()
        .map(|(tensor, shard)| format!(r#""{tensor}":"{shard}""#))
        .collect();
    let metadata = total_size.map_or("{}".to_string(), |t| format!(r#"{{"total_size":{t}}}"#));
    format!(
        r#"{{"metadata":{metadata},"weight_map":{{{}}}}}"#,
        map.join(",")
    )
    .into_bytes()
}

const A: &str = "model-00001-of-00002.safetensors";
const B: &str = "model-00002-of-00002.safetensors";

#[tokio::test]
async fn a_tensor_in_two_shards_counts_once_where_the_index_puts_it() {
    let mut repo = Memory::with_config();
    // `lm_head.weight` is in both files; the index puts it in B.
    repo.put(A, safetensors(&[("embed", 100), ("lm_head.weight", 1000)]));
    repo.put(B, safetensors(&[("lm_head.weight", 1000), ("norm", 10)]));
    repo.put(
        "model.safetensors.index.json",
        index(
            Some(1110),
            &[("embed", A), ("lm_head.weight", B), ("norm", B)],
        ),
    );
    let c = read_checkpoint(&repo).await.unwrap();
    let weights = c.weights.unwrap();
    assert_eq!((weights.bytes.value, weights.tensors), (1110, 3));
    assert_eq!(c.parameters.unwrap().value, 1110, "U8: one element a byte");
    assert_eq!(
        c.notes,
        [
            "safetensors headers: 1 tensor not counted, since model.safetensors.index.json's weight_map puts each in another file or does not name it"
        ]
    );

    // A total_size other than the sum is reported.
    repo.put(
        "model.safetensors.index.json",
        index(
            Some(2110),
            &[("embed", A), ("lm_head.weight", B), ("norm", B)],
        ),
    );
    let c = read_checkpoint(&repo).await.unwrap();
    assert_eq!(c.weights.unwrap().bytes.value, 1110);
    assert!(
        c.notes.contains(&"model.safetensors.index.json metadata.total_size is 2110 bytes, the headers' tensors sum to 1110: the sum is used".to_string()),
        "{:?}",
        c.notes
    );

    // A tensor the index names that its shard lacks is reported too.
    repo.put(
        "model.safetensors.index.json",
        index(None, &[("embed", A), ("lm_head.weight", A), ("norm", B)]),
    );
    let c = read_checkpoint(&repo).await.unwrap();
    assert_eq!(c.weights.unwrap().bytes.value, 1110);
    assert_eq!(c.notes.len(), 1, "{:?}", c.notes);
    assert!(c.notes[0].starts_with("safetensors headers: 1 tensor not counted"));

    repo.put(B, safetensors(&[("norm", 10)]));
    repo.put(
        "model.safetensors.index.json",
        index(None, &[("embed", A), ("lm_head.weight", B), ("norm", B)]),
    );
    let c = read_checkpoint(&repo).await.unwrap();
    assert!(
        c.notes.iter().any(|n| n == "model.safetensors.index.json: 1 of the 3 tensors it names is not in the header of the file its weight_map puts it in: the weights summed may be short"),
        "{:?}",
        c.notes
    );
}

#[tokio::test]
async fn an_index_that_names_no_tensors_falls_back_to_its_total_size_or_the_config() {
    let mut repo = Memory::with_config();
    repo.put(
        "model.safetensors.index.json",
        index(Some(2_471_645_184), &[]),
    );
    let c = read_checkpoint(&repo).await.unwrap();
    let weights = c.weights.unwrap();
    assert_eq!(weights.bytes.value, 2_471_645_184);
    assert_eq!(
        weights.bytes.from.to_string(),
        "model.safetensors.index.json metadata.total_size"
    );
    assert_eq!(
        c.parameters.unwrap().value,
        CONFIG_PARAMETERS,
        "counted from config.json, not 0"
    );

    repo.put("model.safetensors.index.json", index(None, &[]));
    let c = read_checkpoint(&repo).await.unwrap();
    assert!(c.weights.is_none());
    assert_eq!(c.parameters.unwrap().value, CONFIG_PARAMETERS);
}

#[tokio::test]
async fn past_the_request_bound_the_weights_are_the_index_total_size() {
    let shards = (limits::READ_REQUESTS.value - 2) / 2 + 1;
    let names: Vec<String> = (0..shards)
        .map(|i| format!("model-{i:05}.safetensors"))
        .collect();
    let tensors: Vec<String> = (0..shards).map(|i| format!("t{i}")).collect();
    let map: Vec<(&str, &str)> = tensors
        .iter()
        .zip(&names)
        .map(|(t, n)| (t.as_str(), n.as_str()))
        .collect();
    let mut repo = Memory::with_config();
    for (tensor, shard) in &map {
        repo.put(shard, safetensors(&[(tensor, 2)]));
    }
    repo.put(
        "model.safetensors.index.json",
        index(Some(shards * 2), &map),
    );
    let c = read_checkpoint(&repo).await.unwrap();
    assert_eq!(
        repo.requests(),
        ["config.json", "model.safetensors.index.json"],
        "no header is asked for"
    );
    let weights = c.weights.unwrap();
    assert_eq!(weights.bytes.value, shards * 2);
    assert_eq!(
        weights.bytes.from.to_string(),
        format!(
            "model.safetensors.index.json metadata.total_size (the headers of its {shards} shards were not read: {} requests, more than the {} vramfit makes per read)",
            2 + 2 * shards,
            limits::READ_REQUESTS
        )
    );
    assert_eq!(c.parameters.unwrap().value, CONFIG_PARAMETERS);

    // One shard fewer is within the bound: every header is read and summed.
    let mut repo = Memory::with_config();
    for (tensor, shard) in &map[1..] {
        repo.put(shard, safetensors(&[(tensor, 2)]));
    }
    repo.put("model.safetensors.index.json", index(None, &map[1..]));
    let c = read_checkpoint(&repo).await.unwrap();
    assert_eq!(repo.requests().len() as u64, limits::READ_REQUESTS.value);
    assert_eq!(c.weights.unwrap().bytes.value, (shards - 1) * 2);

    // Without a total_size, the weights are unknown and a note says why.
    let mut repo = Memory::with_config();
    repo.put("model.safetensors.index.json", index(None, &map));
    let c = read_checkpoint(&repo).await.unwrap();
    assert!(c.weights.is_none());
    assert!(
        c.notes
            .iter()
            .any(|n| n.starts_with("no weight bytes: the headers of its")),
        "{:?}",
        c.notes
    );
}

#[tokio::test]
async fn a_read_past_its_byte_budget_fails_before_asking_for_the_header() {
    let mut repo = Memory::with_config();
    let config_len = repo.files["config.json"].len() as u64;
    repo.put(A, safetensors(&[("a", 10)]));
    repo.put(B, safetensors(&[("b", 10)]));
    let index_bytes = index(None, &[("a", A), ("b", B)]);
    let index_len = index_bytes.len() as u64;
    repo.put("model.safetensors.index.json", index_bytes);
    let header_len = repo.files[A].len() as u64 - 10 - 8;
    // Room for the config, the index and the first file's length and header: not the second's.
    let budget = config_len + index_len + 2 * (8 + header_len) - 1;
    let limits = ReadLimits {
        bytes: Limit {
            value: budget,
            unit: "bytes",
        },
        ..ReadLimits::default()
    };
    let err = read_checkpoint_with(&repo, limits).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "memory: {B}: this model's read (config.json, the index and the headers up to this file) is {}, more than the {budget} bytes vramfit reads",
            budget + 1
        )
    );
    assert_eq!(
        repo.requests().last().map(String::as_str),
        Some(format!("{B} 0+8").as_str()),
        "the second header is not asked for"
    );
    let whole = ReadLimits {
        bytes: Limit {
            value: budget + 1,
            unit: "bytes",
        },
        ..ReadLimits::default()
    };
    assert!(read_checkpoint_with(&repo, whole).await.is_ok());
}

#[tokio::test]
async fn a_shard_whose_header_names_a_tensor_twice_is_refused() {
    let mut repo = Memory::with_config();
    // Two entries of the same name with empty ranges: no overlap, still named twice.
    let header = r#"{"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}"#;
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend(header.as_bytes());
    repo.put(A, file);
    repo.put("model.safetensors.index.json", index(None, &[("a", A)]));
    let err = read_checkpoint(&repo).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("memory: {A}: inconsistent: its header names a twice")
    );
}
