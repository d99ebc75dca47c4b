//! Why a checkpoint file could not be read. Each message is one line naming the file.
use crate::limits::Limit;

/// A file that is not what it should be.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ModelFileError {
    /// Not valid JSON, or not the JSON object expected.
    #[error("{file}: not valid JSON: {message}")]
    Json {
        /// The file.
        file: String,
        /// What the JSON parser said.
        message: String,
    },
    /// A required number is missing.
    #[error("{file}: no {what} (looked for {keys})")]
    Missing {
        /// The file.
        file: String,
        /// The number in words.
        what: &'static str,
        /// The keys looked for.
        keys: String,
    },
    /// A value of the wrong type or out of range.
    #[error("{file}: {key} is {found}, expected {expected}")]
    BadValue {
        /// The file.
        file: String,
        /// The key.
        key: String,
        /// What was found.
        found: String,
        /// What was expected.
        expected: String,
    },
    /// A size or count beyond what vramfit reads.
    #[error("{file}: {what} is {found}, more than the {limit} vramfit reads")]
    TooLarge {
        /// The file.
        file: String,
        /// What is too large.
        what: &'static str,
        /// The size or count found.
        found: u64,
        /// The limit.
        limit: Limit,
    },
    /// The file ends before its header does.
    #[error("{file}: truncated: {what} ends past the end of the file")]
    Truncated {
        /// The file.
        file: String,
        /// What was being read.
        what: String,
    },
    /// A file that is not of the format named.
    #[error("{file}: not a {format} file: {why}")]
    NotFormat {
        /// The file.
        file: String,
        /// The format expected.
        format: &'static str,
        /// Why not.
        why: String,
    },
    /// The file contradicts itself (offsets that overlap, sizes that do not add up).
    #[error("{file}: inconsistent: {why}")]
    Inconsistent {
        /// The file.
        file: String,
        /// What does not add up.
        why: String,
    },
}
