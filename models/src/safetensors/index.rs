//! `model.safetensors.index.json`, parsed as a stream: `metadata.total_size`, the shard files
//! the weight map names, and where it puts each tensor, kept as a 64-bit keyed hash of its name
//! and a shard number (16 bytes a tensor, at most [`limits::SAFETENSORS_INDEX_TENSORS`]), so
//! that each tensor is counted once, in the shard the weight map puts it in. `metadata`'s other
//! keys and unknown keys are skipped without being built.
use std::collections::BTreeMap;
use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::BuildHasher;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

use super::is_plain_file_name;
use super::stream::{Failure, Text, fail, in_value, run, shorten};
use crate::error::ModelFileError;
use crate::limits;

/// The index of a sharded model.
#[derive(Clone, Debug)]
pub struct Index {
    /// `metadata.total_size`: bytes of all tensors, where given.
    pub total_size: Option<u64>,
    /// The shard files the weight map names, in name order.
    pub shards: Vec<String>,
    /// Tensors the weight map names.
    pub tensors: u64,
    placement: Placement,
}

/// What the weight map says of a tensor found in a shard's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// The weight map puts it in this shard: count it.
    Here,
    /// The weight map puts it in another shard, or does not name it: not counted here.
    Elsewhere,
    /// Counted already: the shard's header names it twice.
    Again,
}

impl Index {
    /// What the weight map says of tensor `name`, found in shard `shard` (a position in
    /// [`Index::shards`]).
    pub fn claim(&mut self, shard: usize, name: &str) -> Claim {
        self.placement.claim(shard, name)
    }

    /// Tensors the weight map names that no shard's header has claimed.
    pub fn unclaimed(&self) -> u64 {
        self.tensors.saturating_sub(self.placement.claimed)
    }
}

/// Where the weight map puts each tensor: (hash of the name, shard), sorted, with where each
/// run of equal top 16 bits starts (a lookup then searches a few entries, not a million).
#[derive(Clone, Debug)]
struct Placement {
    hasher: RandomState,
    entries: Vec<(u64, u16)>,
    starts: Vec<u32>,
    claimed_flags: Vec<bool>,
    claimed: u64,
}

/// Bits of the hash that pick a run.
const BUCKET_BITS: u32 = 16;

impl Placement {
    /// `entries` sorted.
    fn new(hasher: RandomState, entries: Vec<(u64, u16)>) -> Placement {
        let mut starts = vec![0u32; (1 << BUCKET_BITS) + 1];
        for (hash, _) in &entries {
            starts[(hash >> (64 - BUCKET_BITS)) as usize + 1] += 1;
        }
        for bucket in 1..starts.len() {
            starts[bucket] += starts[bucket - 1];
        }
        Placement {
            hasher,
            claimed_flags: vec![false; entries.len()],
            entries,
            starts,
            claimed: 0,
        }
    }

    fn claim(&mut self, shard: usize, name: &str) -> Claim {
        let hash = self.hasher.hash_one(name);
        let bucket = (hash >> (64 - BUCKET_BITS)) as usize;
        let (Some(&from), Some(&to)) = (self.starts.get(bucket), self.starts.get(bucket + 1))
        else {
            return Claim::Elsewhere;
        };
        let (from, to) = (from as usize, to as usize);
        let Some(run) = self.entries.get(from..to) else {
            return Claim::Elsewhere;
        };
        let Ok(at) = run.binary_search_by_key(&hash, |e| e.0) else {
            return Claim::Elsewhere;
        };
        let at = from + at;
        if usize::from(self.entries[at].1) != shard {
            return Claim::Elsewhere;
        }
        if std::mem::replace(&mut self.claimed_flags[at], true) {
            return Claim::Again;
        }
        self.claimed += 1;
        Claim::Here
    }
}

/// Parses `model.safetensors.index.json`.
pub fn parse_index(bytes: &[u8], file: &str) -> Result<Index, ModelFileError> {
    limits::SAFETENSORS_INDEX.check(file, "the file", bytes.len() as u64)?;
    let hasher = RandomState::new();
    let mut shard_ids: BTreeMap<String, u16> = BTreeMap::new();
    let mut entries: Vec<(u64, u16)> = Vec::new();
    let total_size = run(bytes, file, |de, failure| {
        de.deserialize_map(Top {
            file,
            failure,
            each: |name: &str, shard: &str| {
                let count = entries.len() as u64 + 1;
                limits::SAFETENSORS_INDEX_TENSORS.check(file, "the tensor count", count)?;
                let id = match shard_ids.get(shard) {
                    Some(id) => *id,
                    None => {
                        let id = shard_ids.len() as u64;
                        limits::SAFETENSORS_SHARDS.check(file, "the shard count", id + 1)?;
                        // The shard bound (4096) fits in 16 bits.
                        let id = u16::try_from(id).unwrap_or(u16::MAX);
                        shard_ids.insert(shard.to_string(), id);
                        id
                    }
                };
                entries.push((hasher.hash_one(name), id));
                Ok(())
            },
        })
    })?;
    // Shard numbers in name order: a number's position in `shards`.
    let mut order = vec![0u16; shard_ids.len()];
    for (position, id) in shard_ids.values().enumerate() {
        order[usize::from(*id)] = u16::try_from(position).unwrap_or(u16::MAX);
    }
    for entry in &mut entries {
        entry.1 = order[usize::from(entry.1)];
    }
    entries.sort_unstable();
    if let Some(pair) = entries.windows(2).find(|pair| pair[0].0 == pair[1].0) {
        let name = name_with_hash(bytes, file, &hasher, pair[0].0);
        return Err(ModelFileError::Inconsistent {
            file: file.to_string(),
            why: format!("weight_map names {} twice", shorten(&name)),
        });
    }
    let tensors = entries.len() as u64;
    Ok(Index {
        total_size,
        shards: shard_ids.into_keys().collect(),
        tensors,
        placement: Placement::new(hasher, entries),
    })
}

/// The first weight-map name with `hash` (the names were not kept: a second pass finds it).
fn name_with_hash(bytes: &[u8], file: &str, hasher: &RandomState, hash: u64) -> String {
    let mut found = None;
    let _ = run(bytes, file, |de, failure| {
        de.deserialize_map(Top {
            file,
            failure,
            each: |name: &str, _: &str| {
                if found.is_none() && hasher.hash_one(name) == hash {
                    found = Some(name.to_string());
                }
                Ok(())
            },
        })
    });
    found.unwrap_or_else(|| "a tensor".to_string())
}

/// The index's object: `metadata.total_size` returned, each weight-map entry handed to `each`.
struct Top<'a, F> {
    file: &'a str,
    failure: &'a mut Failure,
    each: F,
}

impl<'de, F> Visitor<'de> for Top<'_, F>
where
    F: FnMut(&str, &str) -> Result<(), ModelFileError>,
{
    type Value = Option<u64>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a safetensors index (a JSON object with a weight_map)")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut total_size, mut metadata_seen, mut weight_map_seen) = (None, false, false);
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            let seen = match key.as_ref() {
                "metadata" => {
                    total_size = map
                        .next_value_seed(Metadata {
                            file: self.file,
                            failure: &mut *self.failure,
                        })
                        .map_err(|e| in_value(self.failure, self.file, "metadata", e))?;
                    &mut metadata_seen
                }
                "weight_map" => {
                    map.next_value_seed(WeightMap {
                        file: self.file,
                        failure: &mut *self.failure,
                        each: &mut self.each,
                    })?;
                    &mut weight_map_seen
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            if std::mem::replace(seen, true) {
                let error = ModelFileError::Inconsistent {
                    file: self.file.to_string(),
                    why: format!("{key} given twice"),
                };
                return Err(fail(self.failure, error));
            }
        }
        if !weight_map_seen {
            let error = ModelFileError::Missing {
                file: self.file.to_string(),
                what: "weight map",
                keys: "weight_map".into(),
            };
            return Err(fail(self.failure, error));
        }
        Ok(total_size)
    }
}

/// `metadata`: its `total_size` (a byte count; `null` is none), other keys skipped.
struct Metadata<'a> {
    file: &'a str,
    failure: &'a mut Failure,
}

impl<'de> DeserializeSeed<'de> for Metadata<'_> {
    type Value = Option<u64>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        // `any`: `null` is no metadata.
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Metadata<'_> {
    type Value = Option<u64>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut total_size = None;
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            if key != "total_size" {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            let value: Option<serde_json::Number> = map.next_value()?;
            total_size = match value {
                None => None,
                Some(number) => Some(byte_count(&number).ok_or_else(|| {
                    let error = ModelFileError::BadValue {
                        file: self.file.to_string(),
                        key: "metadata.total_size".into(),
                        found: number.to_string(),
                        expected: "a byte count".into(),
                    };
                    fail::<A::Error>(self.failure, error)
                })?),
            };
        }
        Ok(total_size)
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// A non-negative integer, also when written as a float (`1.6e10`).
fn byte_count(number: &serde_json::Number) -> Option<u64> {
    number.as_u64().or_else(|| {
        number
            .as_f64()
            .filter(|f| *f >= 0.0 && f.fract() == 0.0 && *f < u64::MAX as f64)
            .map(|f| f as u64)
    })
}

/// `weight_map`: tensor name → shard file, each entry checked and handed on.
struct WeightMap<'a, F> {
    file: &'a str,
    failure: &'a mut Failure,
    each: &'a mut F,
}

impl<'de, F> DeserializeSeed<'de> for WeightMap<'_, F>
where
    F: FnMut(&str, &str) -> Result<(), ModelFileError>,
{
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de, F> Visitor<'de> for WeightMap<'_, F>
where
    F: FnMut(&str, &str) -> Result<(), ModelFileError>,
{
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a weight map (tensor name → file name)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(Text(name)) = map.next_key::<Text<'de>>()? {
            let key = format!("weight_map.{}", shorten(&name));
            let Text(shard) = map
                .next_value::<Text<'de>>()
                .map_err(|e| in_value(self.failure, self.file, &key, e))?;
            if !is_plain_file_name(&shard) || !shard.ends_with(".safetensors") {
                let error = ModelFileError::BadValue {
                    file: self.file.to_string(),
                    key,
                    found: format!("{:?}", shorten(&shard)),
                    expected: "a .safetensors file name in the same folder".into(),
                };
                return Err(fail(self.failure, error));
            }
            if let Err(error) = (self.each)(&name, &shard) {
                return Err(fail(self.failure, error));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::safetensors::INDEX_FILE;

    #[test]
    fn the_index_names_plain_shard_files_only() {
        let index = br#"{"metadata":{"total_size":16060522496,"format":"pt"},"weight_map":{
            "a":"model-00002-of-00002.safetensors","b":"model-00001-of-00002.safetensors",
            "c":"model-00002-of-00002.safetensors"},"extra":{"x":[1,2,{"y":null}]}}"#;
        let mut parsed = parse_index(index, INDEX_FILE).unwrap();
        assert_eq!(parsed.total_size, Some(16_060_522_496));
        assert_eq!(
            parsed.shards,
            [
                "model-00001-of-00002.safetensors",
                "model-00002-of-00002.safetensors"
            ]
        );
        assert_eq!(parsed.tensors, 3);
        assert_eq!(parsed.claim(1, "a"), Claim::Here);
        assert_eq!(parsed.claim(1, "a"), Claim::Again);
        assert_eq!(parsed.claim(1, "b"), Claim::Elsewhere, "b is in shard 0");
        assert_eq!(parsed.claim(0, "zzz"), Claim::Elsewhere, "not named");
        assert_eq!(parsed.unclaimed(), 2);
        for evil in [
            "../../etc/passwd",
            "/abs.safetensors",
            "sub/dir.safetensors",
            ".hidden.safetensors",
            "x.bin",
        ] {
            let text = format!(r#"{{"weight_map":{{"a":"{evil}"}}}}"#);
            let err = parse_index(text.as_bytes(), INDEX_FILE)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("a .safetensors file name in the same folder"),
                "{evil}: {err}"
            );
        }
    }

    #[test]
    fn total_size_may_be_a_float_or_null_but_is_a_byte_count() {
        let parse = |total: &str| {
            let text = format!(r#"{{"metadata":{{"total_size":{total}}},"weight_map":{{}}}}"#);
            parse_index(text.as_bytes(), INDEX_FILE).map(|i| i.total_size)
        };
        assert_eq!(parse("1.6e10").unwrap(), Some(16_000_000_000));
        assert_eq!(parse("null").unwrap(), None);
        assert_eq!(
            parse("-1").unwrap_err().to_string(),
            "model.safetensors.index.json: metadata.total_size is -1, expected a byte count"
        );
        assert!(parse("\"big\"").is_err());
        let no_metadata = parse_index(br#"{"metadata":null,"weight_map":{}}"#, INDEX_FILE);
        assert_eq!(no_metadata.unwrap().total_size, None);
    }

    #[test]
    fn a_tensor_named_twice_or_a_missing_weight_map_is_refused() {
        let twice =
            br#"{"weight_map":{"a":"x.safetensors","b":"x.safetensors","a":"y.safetensors"}}"#;
        assert_eq!(
            parse_index(twice, INDEX_FILE).unwrap_err().to_string(),
            "model.safetensors.index.json: inconsistent: weight_map names a twice"
        );
        let two_maps = br#"{"weight_map":{},"weight_map":{}}"#;
        assert!(
            parse_index(two_maps, INDEX_FILE)
                .unwrap_err()
                .to_string()
                .contains("weight_map given twice")
        );
        assert_eq!(
            parse_index(br#"{"metadata":{}}"#, INDEX_FILE)
                .unwrap_err()
                .to_string(),
            "model.safetensors.index.json: no weight map (looked for weight_map)"
        );
        let not_a_name = br#"{"weight_map":{"a":5}}"#;
        let err = parse_index(not_a_name, INDEX_FILE).unwrap_err().to_string();
        assert!(
            err.contains("weight_map.a: invalid type: integer `5`, expected a string"),
            "{err}"
        );
    }

    #[test]
    fn the_bounds_on_tensors_and_shards_hold_as_it_reads() {
        let shards = limits::SAFETENSORS_SHARDS.value + 1;
        let mut text = String::from(r#"{"weight_map":{"#);
        for i in 0..shards {
            if i > 0 {
                text.push(',');
            }
            text.push_str(&format!(r#""t{i}":"s{i}.safetensors""#));
        }
        text.push_str("}}");
        assert_eq!(
            parse_index(text.as_bytes(), INDEX_FILE)
                .unwrap_err()
                .to_string(),
            format!(
                "model.safetensors.index.json: the shard count is {shards}, more than the {} shards vramfit reads",
                shards - 1
            )
        );
        let tensors = limits::SAFETENSORS_INDEX_TENSORS.value + 1;
        let mut text = String::from(r#"{"weight_map":{"#);
        for i in 0..tensors {
            if i > 0 {
                text.push(',');
            }
            text.push_str(&format!(r#""{i}":"s.safetensors""#));
        }
        text.push_str("}}");
        assert!(text.len() as u64 <= limits::SAFETENSORS_INDEX.value);
        assert_eq!(
            parse_index(text.as_bytes(), INDEX_FILE)
                .unwrap_err()
                .to_string(),
            format!(
                "model.safetensors.index.json: the tensor count is {tensors}, more than the {} tensors vramfit reads",
                tensors - 1
            )
        );
    }
}
