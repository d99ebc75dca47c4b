//! What a file must hash to, and the hashing: the Hub's SHA-256 of an LFS file, or the git blob
//! hash (SHA-1 of `blob <size>\0` and the bytes) of a file kept in git itself. A file is served
//! only when its size and its hash match.
use std::path::Path;

use ring::digest::{Context, SHA1_FOR_LEGACY_USE_ONLY, SHA256};
use tokio::io::AsyncReadExt;

use crate::no_follow::{EntryKind, entry_kind, open_read};

/// The hash a file must have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expected {
    /// An LFS file's SHA-256 (lowercase hex).
    Sha256(String),
    /// A git blob's object id (lowercase hex SHA-1 of `blob <size>\0` and the bytes).
    GitBlob(String),
    /// The listing gave no hash: the size alone is checked.
    SizeOnly,
}

/// A hash being computed over a file's bytes as they arrive.
pub struct Hasher {
    context: Option<Context>,
}

impl Hasher {
    /// A hasher for a file of `size` bytes that must match `expected`.
    pub fn new(expected: &Expected, size: u64) -> Hasher {
        let context = match expected {
            Expected::Sha256(_) => Some(Context::new(&SHA256)),
            Expected::GitBlob(_) => {
                let mut context = Context::new(&SHA1_FOR_LEGACY_USE_ONLY);
                context.update(format!("blob {size}\0").as_bytes());
                Some(context)
            }
            Expected::SizeOnly => None,
        };
        Hasher { context }
    }

    /// Feeds the next bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        if let Some(context) = &mut self.context {
            context.update(bytes);
        }
    }

    /// Lowercase hex of the hash; `None` when nothing is hashed (`SizeOnly`).
    pub fn finish(self) -> Option<String> {
        self.context.map(|c| hex(c.finish().as_ref()))
    }
}

impl Expected {
    /// The hex the hash must equal, if any.
    pub fn hex(&self) -> Option<&str> {
        match self {
            Expected::Sha256(h) | Expected::GitBlob(h) => Some(h),
            Expected::SizeOnly => None,
        }
    }

    /// The name of the hash, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Expected::Sha256(_) => "SHA-256",
            Expected::GitBlob(_) => "git blob SHA-1",
            Expected::SizeOnly => "size",
        }
    }
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Why a file does not match.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mismatch {
    /// Not a regular file (a link, a folder, a device): never read through.
    NotAFile(&'static str),
    /// Not there.
    Missing,
    /// The file has another size.
    Size {
        /// The size the listing gave.
        expected: u64,
        /// The size found.
        found: u64,
    },
    /// The bytes hash to something else.
    Hash {
        /// Which hash.
        name: &'static str,
        /// The hash the listing gave.
        expected: String,
        /// The hash of the bytes.
        found: String,
    },
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mismatch::NotAFile(what) => write!(f, "{what}, not a regular file"),
            Mismatch::Missing => write!(f, "missing"),
            Mismatch::Size { expected, found } => {
                write!(f, "{found} bytes where the Hub lists {expected}")
            }
            Mismatch::Hash {
                name,
                expected,
                found,
            } => write!(f, "{name} {found} where the Hub lists {expected}"),
        }
    }
}

/// Whether `size` bytes hashing to `found` are the file the listing names.
pub fn check(
    expected: &Expected,
    expected_size: u64,
    size: u64,
    found: Option<String>,
) -> Result<(), Mismatch> {
    if size != expected_size {
        return Err(Mismatch::Size {
            expected: expected_size,
            found: size,
        });
    }
    match (expected.hex(), found) {
        (Some(want), Some(got)) if !want.eq_ignore_ascii_case(&got) => Err(Mismatch::Hash {
            name: expected.name(),
            expected: want.to_string(),
            found: got,
        }),
        _ => Ok(()),
    }
}

/// Feeds the first `len` bytes of the file at `path` to `hasher` (a partial download being
/// resumed, or a file in place being checked); the number of bytes read.
/// A link or anything but a regular file is refused, never read through.
pub async fn hash_file(path: &Path, len: u64, hasher: &mut Hasher) -> std::io::Result<u64> {
    let mut file = open_read(path).await?;
    let mut buffer = vec![0u8; 1 << 20];
    let mut read = 0u64;
    while read < len {
        let want = (len - read).min(buffer.len() as u64) as usize;
        let n = file.read(&mut buffer[..want]).await?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
        read += n as u64;
    }
    Ok(read)
}

/// Checks a file in place by its type (a regular file, seen without following a link), its
/// size and, when `rehash`, its hash.
pub async fn verify_in_place(
    path: &Path,
    expected: &Expected,
    expected_size: u64,
    rehash: bool,
) -> std::io::Result<Result<(), Mismatch>> {
    let size = match entry_kind(path).await? {
        EntryKind::File(size) => size,
        EntryKind::Absent => return Ok(Err(Mismatch::Missing)),
        EntryKind::Dir => return Ok(Err(Mismatch::NotAFile("a folder"))),
        EntryKind::Foreign(what) => return Ok(Err(Mismatch::NotAFile(what))),
    };
    if size != expected_size || !rehash {
        return Ok(check(expected, expected_size, size, None));
    }
    let mut hasher = Hasher::new(expected, size);
    let read = hash_file(path, size, &mut hasher).await?;
    Ok(check(expected, expected_size, read, hasher.finish()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_match_the_hubs_sha256_and_git_blob_ids() {
        // `printf hello | sha256sum` and `printf hello | git hash-object --stdin`.
        let sha = Expected::Sha256(
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824".into(),
        );
        let blob = Expected::GitBlob("b6fc4c620b67d95f953a5c1c1230aaab5db5a1b0".into());
        for expected in [&sha, &blob] {
            let mut hasher = Hasher::new(expected, 5);
            hasher.update(b"hel");
            hasher.update(b"lo");
            assert_eq!(check(expected, 5, 5, hasher.finish()), Ok(()));
            let mut other = Hasher::new(expected, 5);
            other.update(b"hellO");
            assert!(matches!(
                check(expected, 5, 5, other.finish()),
                Err(Mismatch::Hash { .. })
            ));
        }
        assert_eq!(
            check(&Expected::SizeOnly, 5, 4, None),
            Err(Mismatch::Size {
                expected: 5,
                found: 4
            })
        );
    }
}
