//! Reading typed values out of one JSON object of a `config.json`, each with its dotted key
//! for the facts' origins.
use serde_json::{Map, Value};

use crate::error::ModelFileError;
use crate::facts::Fact;

/// One object of a config file: the root, `text_config`, `vision_config` …
#[derive(Clone, Copy)]
pub(crate) struct Section<'a> {
    pub file: &'a str,
    /// Dotted path of this object (`""` for the root, `"text_config."`).
    pub prefix: &'a str,
    pub map: &'a Map<String, Value>,
}

impl<'a> Section<'a> {
    /// The value of `key`, treating `null` as absent.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// The nested object at `key`.
    pub fn object(&self, key: &'static str, prefix: &'a str) -> Option<Section<'a>> {
        self.get(key).and_then(Value::as_object).map(|map| Section {
            file: self.file,
            prefix,
            map,
        })
    }

    pub fn dotted(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// The first of `keys` present, as a non-negative integer.
    pub fn integer(&self, keys: &[&str]) -> Result<Option<Fact<u64>>, ModelFileError> {
        for key in keys {
            if let Some(value) = self.get(key) {
                let number = value
                    .as_u64()
                    .ok_or_else(|| self.bad(key, value, "an integer"))?;
                return Ok(Some(Fact::key(number, self.file, &self.dotted(key))));
            }
        }
        Ok(None)
    }

    /// Like [`Self::integer`], in u32 and at least 1.
    pub fn count(&self, keys: &[&str]) -> Result<Option<Fact<u32>>, ModelFileError> {
        match self.integer(keys)? {
            None => Ok(None),
            Some(fact) => match u32::try_from(fact.value) {
                Ok(value) if value > 0 => Ok(Some(Fact {
                    value,
                    from: fact.from,
                })),
                _ => Err(ModelFileError::BadValue {
                    file: self.file.to_string(),
                    key: fact.from.to_string(),
                    found: fact.value.to_string(),
                    expected: "a count from 1 to 4294967295".into(),
                }),
            },
        }
    }

    /// A required count.
    pub fn required(&self, what: &'static str, keys: &[&str]) -> Result<Fact<u32>, ModelFileError> {
        self.count(keys)?.ok_or_else(|| ModelFileError::Missing {
            file: self.file.to_string(),
            what,
            keys: keys
                .iter()
                .map(|k| self.dotted(k))
                .collect::<Vec<_>>()
                .join(", "),
        })
    }

    /// A boolean, if present.
    pub fn flag(&self, key: &str) -> Result<Option<bool>, ModelFileError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.bad(key, other, "true or false")),
        }
    }

    /// A string, if present.
    pub fn string(&self, key: &str) -> Result<Option<&'a str>, ModelFileError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.bad(key, other, "a string")),
        }
    }

    /// The length of an array, if present.
    pub fn array_len(&self, key: &str) -> Result<Option<usize>, ModelFileError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(items)) => Ok(Some(items.len())),
            Some(other) => Err(self.bad(key, other, "a list")),
        }
    }

    /// The length of a list of one item per layer at most (`layers`), if present.
    pub fn layer_list_len(&self, key: &str, layers: u32) -> Result<Option<usize>, ModelFileError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(items)) => {
                self.at_most_one_per_layer(key, items, layers)?;
                Ok(Some(items.len()))
            }
            Some(other) => Err(self.bad(key, other, "a list")),
        }
    }

    /// A list of layer indices (at most one per layer), sorted, without repeats; empty when
    /// absent. Indices past the last layer are kept (they match no layer, as in transformers).
    pub fn layer_indices(&self, key: &str, layers: u32) -> Result<Vec<u64>, ModelFileError> {
        let items = match self.get(key) {
            None => return Ok(Vec::new()),
            Some(Value::Array(items)) => items,
            Some(other) => return Err(self.bad(key, other, "a list of layer indices")),
        };
        self.at_most_one_per_layer(key, items, layers)?;
        let mut indices = items
            .iter()
            .map(|item| {
                item.as_u64()
                    .ok_or_else(|| self.bad(key, item, "a list of layer indices"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        indices.sort_unstable();
        indices.dedup();
        Ok(indices)
    }

    /// A per-layer list longer than the model's layers is refused before its items are read.
    fn at_most_one_per_layer(
        &self,
        key: &str,
        items: &[Value],
        layers: u32,
    ) -> Result<(), ModelFileError> {
        if items.len() as u64 > u64::from(layers) {
            return Err(ModelFileError::BadValue {
                file: self.file.to_string(),
                key: self.dotted(key),
                found: format!("a list of {} items", items.len()),
                expected: format!("at most one per layer ({layers})"),
            });
        }
        Ok(())
    }

    pub fn bad(&self, key: &str, found: &Value, expected: &str) -> ModelFileError {
        let mut found = found.to_string();
        if let Some((cut, _)) = found.char_indices().nth(40) {
            found.truncate(cut);
            found.push('…');
        }
        ModelFileError::BadValue {
            file: self.file.to_string(),
            key: self.dotted(key),
            found,
            expected: expected.to_string(),
        }
    }
}
