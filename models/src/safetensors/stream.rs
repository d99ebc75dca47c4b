//! Pieces shared by the streaming parses of the index and the headers: a string borrowed from
//! the input where it has no escapes, and a way for a visitor to stop the parse with a
//! [`ModelFileError`] of its own (serde's errors carry only a message).
use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use crate::error::ModelFileError;

/// A JSON string: borrowed from the input where it has no escapes.
pub(super) struct Text<'de>(pub Cow<'de, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(TextVisitor)
    }
}

struct TextVisitor;

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Text<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Text(Cow::Borrowed(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Text(Cow::Owned(v.to_string())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Text(Cow::Owned(v)))
    }
}

/// Where a visitor leaves the error that stopped the parse.
pub(super) type Failure = Option<ModelFileError>;

/// Stops the parse with `error`: kept in `slot`, which [`finish`] prefers to serde's error.
pub(super) fn fail<E: de::Error>(slot: &mut Failure, error: ModelFileError) -> E {
    let message = error.to_string();
    if slot.is_none() {
        *slot = Some(error);
    }
    E::custom(message)
}

/// Parses `bytes` with `parse`, which must take the whole input (one JSON value, then only
/// whitespace). The error a visitor left in `failure` wins; else serde's, as invalid JSON.
pub(super) fn run<'de, T>(
    bytes: &'de [u8],
    file: &str,
    parse: impl FnOnce(
        &mut serde_json::Deserializer<serde_json::de::SliceRead<'de>>,
        &mut Failure,
    ) -> Result<T, serde_json::Error>,
) -> Result<T, ModelFileError> {
    let mut failure = None;
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let result = parse(&mut deserializer, &mut failure).and_then(|value| {
        deserializer.end()?;
        Ok(value)
    });
    match (result, failure) {
        (_, Some(error)) => Err(error),
        (Ok(value), None) => Ok(value),
        (Err(e), None) => Err(ModelFileError::Json {
            file: file.to_string(),
            message: e.to_string(),
        }),
    }
}

/// The error of a value that did not parse, with the key it belongs to, unless a visitor
/// already left its own.
pub(super) fn in_value<E: de::Error>(slot: &mut Failure, file: &str, key: &str, error: E) -> E {
    if slot.is_none() {
        *slot = Some(ModelFileError::Json {
            file: file.to_string(),
            message: format!("{}: {error}", shorten(key)),
        });
    }
    error
}

/// A key or value cut to 80 characters, for messages.
pub(super) fn shorten(text: &str) -> Cow<'_, str> {
    match text.char_indices().nth(80) {
        Some((cut, _)) => Cow::Owned(format!("{}…", &text[..cut])),
        None => Cow::Borrowed(text),
    }
}
