//! Checking again a model already complete, against what its record says was verified: its
//! folder may be mounted into pods, so a file may have changed since it was downloaded. Two
//! depths:
//!
//! - `Cheap`: every file's type and size (`lstat`, never following a link) and the hash of
//!   every file of at most `SMALL_FILE_BYTES` (`config.json`, tokenizers, `*.py`: what remote
//!   code loads), plus the folder searched for anything the cache never wrote;
//! - `Full`: the hash of every file, resumable: cut at a deadline between two files, it says
//!   where to go on.
//!
//! Anything found in the folder that the cache did not write (a link, a device, a file the
//! record does not name) is removed without being followed; a file that does not match is
//! removed too. `apply` then marks the model incomplete, with why, so that it is no longer
//! served and its files are fetched again.
use std::collections::BTreeSet;
use std::ops::Bound;
use std::time::Instant;

use crate::layout::Layout;
use crate::no_follow::{EntryKind, entry_kind, remove_below, remove_entry};
use crate::store::{ModelRecord, Store, StoreError};
use crate::verify::{Expected, Hasher, check, hash_file};

/// The largest file the cheap check hashes.
pub const SMALL_FILE_BYTES: u64 = 1 << 20;

/// How deep a re-verification goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Depth {
    /// Type and size of every file, hash of the small ones, the folder searched.
    Cheap,
    /// Hash of every file.
    Full,
}

/// What a re-verification found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Files that no longer match, with why (removed).
    pub bad: Vec<(String, String)>,
    /// Entries the cache did not write, removed without being followed.
    pub foreign: Vec<String>,
    /// Files hashed.
    pub hashed_files: usize,
    /// Bytes hashed.
    pub hashed_bytes: u64,
    /// Sizes of files verified by hash whose size the record did not keep.
    pub sizes_learnt: Vec<(String, u64)>,
    /// A `Full` check cut short by its deadline: the next file to check.
    pub resume_at: Option<String>,
}

impl Report {
    /// Whether the model still matches.
    pub fn intact(&self) -> bool {
        self.bad.is_empty() && self.foreign.is_empty()
    }

    /// Why not, in one line.
    pub fn damage(&self) -> Option<String> {
        if self.intact() {
            return None;
        }
        let mut parts: Vec<String> = self
            .bad
            .iter()
            .take(3)
            .map(|(path, why)| format!("{path}: {why}"))
            .collect();
        if let Some(first) = self.foreign.first() {
            parts.push(format!(
                "{} entr{} the cache did not write (first: {first})",
                self.foreign.len(),
                if self.foreign.len() == 1 { "y" } else { "ies" }
            ));
        }
        if self.bad.len() > 3 {
            parts.push(format!("{} more files", self.bad.len() - 3));
        }
        Some(format!(
            "re-verification failed: {}; fetched again",
            parts.join("; ")
        ))
    }
}

/// What a record's fingerprint says a file must hash to, and its size when the fingerprint
/// holds it.
pub fn expected_of(fingerprint: &str) -> Option<(Expected, Option<u64>)> {
    let (kind, value) = fingerprint.split_once(':')?;
    match kind {
        "sha256" => Some((Expected::Sha256(value.to_string()), None)),
        "git-blob" => Some((Expected::GitBlob(value.to_string()), None)),
        "size" => Some((Expected::SizeOnly, Some(value.parse().ok()?))),
        _ => None,
    }
}

/// Checks `record`'s model in place at `depth`. A `Full` check starts at `start_at` (a path
/// of the record, the first when `None`) and stops before the next file once `until` has
/// passed; the folder is searched only by a check that starts at the first file.
pub async fn reverify(
    layout: &Layout,
    record: &ModelRecord,
    depth: Depth,
    start_at: Option<&str>,
    until: Option<Instant>,
) -> std::io::Result<Report> {
    let repo = record
        .repo_ref()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()))?;
    let dir = layout.model_dir(&repo);
    let mut report = Report::default();
    if start_at.is_none() {
        let known: BTreeSet<&str> = record.verified.keys().map(String::as_str).collect();
        report.foreign = remove_unknown(&dir, &known).await?;
    }
    let start = start_at.map_or(Bound::Unbounded, Bound::Included);
    for (path, fingerprint) in record.verified.range::<str, _>((start, Bound::Unbounded)) {
        if depth == Depth::Full
            && report.hashed_files > 0
            && until.is_some_and(|until| Instant::now() >= until)
        {
            report.resume_at = Some(path.clone());
            break;
        }
        let file = layout.file_path(&repo, path);
        let Some((expected, fingerprint_size)) = expected_of(fingerprint) else {
            report
                .bad
                .push((path.clone(), "an unknown fingerprint".into()));
            remove_entry(&file).await?;
            continue;
        };
        let recorded = record.sizes.get(path).copied().or(fingerprint_size);
        let size = match entry_kind(&file).await? {
            EntryKind::File(size) => size,
            EntryKind::Absent => {
                report.bad.push((path.clone(), "missing".into()));
                continue;
            }
            EntryKind::Dir => {
                report.bad.push((path.clone(), "a folder".into()));
                remove_entry(&file).await?;
                continue;
            }
            EntryKind::Foreign(what) => {
                report.bad.push((path.clone(), what.into()));
                remove_entry(&file).await?;
                continue;
            }
        };
        if let Some(recorded) = recorded
            && recorded != size
        {
            report.bad.push((
                path.clone(),
                format!("{size} bytes where {recorded} were verified"),
            ));
            remove_entry(&file).await?;
            continue;
        }
        if depth == Depth::Cheap && size > SMALL_FILE_BYTES {
            continue;
        }
        let mut hasher = Hasher::new(&expected, size);
        let read = hash_file(&file, size, &mut hasher).await?;
        report.hashed_files += 1;
        report.hashed_bytes = report.hashed_bytes.saturating_add(read);
        match check(&expected, size, read, hasher.finish()) {
            Ok(()) if recorded.is_none() => report.sizes_learnt.push((path.clone(), size)),
            Ok(()) => {}
            Err(mismatch) => {
                report.bad.push((path.clone(), mismatch.to_string()));
                remove_entry(&file).await?;
            }
        }
    }
    Ok(report)
}

/// Removes, without following, every entry under `dir` that is neither a real folder nor a
/// regular file named in `known`; the `/`-separated paths removed, sorted.
async fn remove_unknown(
    dir: &std::path::Path,
    known: &BTreeSet<&str>,
) -> std::io::Result<Vec<String>> {
    if entry_kind(dir).await? != EntryKind::Dir {
        return Ok(Vec::new());
    }
    remove_below(dir, |relative, kind| {
        !matches!(kind, EntryKind::File(_)) || !known.contains(relative)
    })
    .await
}

/// Writes what `report` found into the model's record: a damaged model is no longer complete
/// (with why), its bad files are no longer verified, so the next fetch brings them again;
/// sizes learnt are kept. Returns the record as written (`None`: nothing to write).
pub async fn apply(
    store: &Store,
    mut record: ModelRecord,
    report: &Report,
) -> Result<Option<ModelRecord>, StoreError> {
    if report.intact() && report.sizes_learnt.is_empty() {
        return Ok(None);
    }
    for (path, size) in &report.sizes_learnt {
        record.sizes.insert(path.clone(), *size);
    }
    if let Some(damage) = report.damage() {
        for (path, _) in &report.bad {
            record.verified.remove(path);
            if let Some(size) = record.sizes.remove(path) {
                record.bytes = record.bytes.saturating_sub(size);
            }
        }
        record.complete = false;
        record.damage = Some(damage);
    }
    store.write(&record).await?;
    Ok(Some(record))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Access;
    use crate::verify::hex;
    use ring::digest::{SHA256, digest};
    use vramfit_hub::RepoRef;

    /// A complete model of `files` written by hand, as a fetch would leave it.
    async fn complete(store: &Store, name: &str, files: &[(&str, Vec<u8>)]) -> ModelRecord {
        let repo = RepoRef::parse(name).unwrap();
        let mut record = ModelRecord::new(&repo, Access::Public, 1);
        for (path, bytes) in files {
            let file = store.layout().file_path(&repo, path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, bytes).unwrap();
            record.verified.insert(
                path.to_string(),
                format!("sha256:{}", hex(digest(&SHA256, bytes).as_ref())),
            );
            record.sizes.insert(path.to_string(), bytes.len() as u64);
            record.bytes += bytes.len() as u64;
        }
        record.total_bytes = record.bytes;
        record.complete = true;
        store.write(&record).await.unwrap();
        record
    }

    fn files() -> Vec<(&'static str, Vec<u8>)> {
        vec![
            ("config.json", b"{\"a\": 1}".to_vec()),
            ("modeling.py", b"print('hi')".to_vec()),
            (
                "model.safetensors",
                vec![7u8; (SMALL_FILE_BYTES + 10) as usize],
            ),
        ]
    }

    #[tokio::test]
    async fn an_intact_model_passes_and_the_cheap_check_hashes_only_small_files() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::new(Layout::new(root.path()));
        let record = complete(&store, "org/m", &files()).await;
        let cheap = reverify(store.layout(), &record, Depth::Cheap, None, None)
            .await
            .unwrap();
        assert!(cheap.intact(), "{cheap:?}");
        assert_eq!(cheap.hashed_files, 2);
        let full = reverify(store.layout(), &record, Depth::Full, None, None)
            .await
            .unwrap();
        assert!(full.intact());
        assert_eq!(full.hashed_files, 3);
        assert_eq!(apply(&store, record, &full).await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_changed_small_file_a_planted_link_and_a_stranger_make_the_model_incomplete() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::new(Layout::new(root.path()));
        let other = complete(&store, "org/other", &files()).await;
        let record = complete(&store, "org/m", &files()).await;
        let layout = store.layout();
        let repo = record.repo_ref().unwrap();
        let other_config = layout.file_path(&other.repo_ref().unwrap(), "config.json");
        // Same size, other bytes: only a hash sees it.
        std::fs::write(layout.file_path(&repo, "modeling.py"), b"print('HI')").unwrap();
        // A listed file replaced by a link to another model's file.
        let config = layout.file_path(&repo, "config.json");
        std::fs::remove_file(&config).unwrap();
        std::os::unix::fs::symlink(&other_config, &config).unwrap();
        std::fs::write(layout.model_dir(&repo).join("extra.py"), b"x").unwrap();

        let report = reverify(layout, &record, Depth::Cheap, None, None)
            .await
            .unwrap();
        let bad: Vec<&str> = report.bad.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(bad, ["config.json", "modeling.py"]);
        // The link is an entry the cache did not write (removed, not followed); the file it
        // stood for is then missing.
        assert_eq!(report.foreign, ["config.json", "extra.py"]);
        assert!(!config.exists() && std::fs::symlink_metadata(&config).is_err());
        assert_eq!(std::fs::read(&other_config).unwrap(), b"{\"a\": 1}");

        let written = apply(&store, record, &report).await.unwrap().unwrap();
        assert!(!written.complete);
        assert!(written.damage.as_deref().unwrap().contains("modeling.py"));
        assert!(!written.verified.contains_key("config.json"));
        assert!(written.verified.contains_key("model.safetensors"));
        assert_eq!(store.read(&repo).await.unwrap(), Some(written));
        assert!(
            store
                .read(&other.repo_ref().unwrap())
                .await
                .unwrap()
                .unwrap()
                .complete
        );
    }

    #[tokio::test]
    async fn a_full_check_catches_a_large_file_of_the_same_size_and_resumes_where_it_stopped() {
        let root = tempfile::tempdir().unwrap();
        let store = Store::new(Layout::new(root.path()));
        let record = complete(&store, "org/m", &files()).await;
        let repo = record.repo_ref().unwrap();
        let weights = store.layout().file_path(&repo, "model.safetensors");
        let mut bytes = std::fs::read(&weights).unwrap();
        bytes[5] = 8;
        std::fs::write(&weights, &bytes).unwrap();
        let cheap = reverify(store.layout(), &record, Depth::Cheap, None, None)
            .await
            .unwrap();
        assert!(cheap.intact());

        // A deadline already passed: one file, then where to go on.
        let first = reverify(
            store.layout(),
            &record,
            Depth::Full,
            None,
            Some(Instant::now()),
        )
        .await
        .unwrap();
        assert_eq!(first.hashed_files, 1);
        assert_eq!(first.resume_at.as_deref(), Some("model.safetensors"));
        let rest = reverify(
            store.layout(),
            &record,
            Depth::Full,
            first.resume_at.as_deref(),
            None,
        )
        .await
        .unwrap();
        assert_eq!(rest.bad.len(), 1, "{rest:?}");
        assert_eq!(rest.bad[0].0, "model.safetensors");
        assert_eq!(rest.resume_at, None);
        assert!(!weights.exists());
    }

    #[test]
    fn fingerprints_name_what_a_file_must_hash_to() {
        assert_eq!(
            expected_of("sha256:ab"),
            Some((Expected::Sha256("ab".into()), None))
        );
        assert_eq!(expected_of("size:12"), Some((Expected::SizeOnly, Some(12))));
        assert_eq!(expected_of("md5:x"), None);
    }
}
