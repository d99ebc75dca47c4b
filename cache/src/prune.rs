//! Files in a model's folder that its listing no longer names (a branch that moved, a download
//! given up) are deleted before the model is complete, so that a mounted folder holds exactly
//! the revision's files and the record's bytes are what the disk holds.
use std::collections::BTreeSet;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// Deletes every file under `dir` whose `/`-separated path relative to `dir` is not in
/// `listed` (symbolic links are deleted, never followed); the relative paths deleted.
pub async fn remove_unlisted(dir: &Path, listed: &BTreeSet<&str>) -> std::io::Result<Vec<String>> {
    let mut removed = Vec::new();
    let mut folders: Vec<(PathBuf, String)> = vec![(dir.to_path_buf(), String::new())];
    while let Some((folder, prefix)) = folders.pop() {
        let mut entries = match tokio::fs::read_dir(&folder).await {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        while let Some(entry) = entries.next_entry().await? {
            let name = entry.file_name().to_string_lossy().into_owned();
            let relative = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            let kind = tokio::fs::symlink_metadata(entry.path()).await?.file_type();
            if kind.is_dir() {
                folders.push((entry.path(), relative));
            } else if !listed.contains(relative.as_str()) {
                tokio::fs::remove_file(entry.path()).await?;
                removed.push(relative);
            }
        }
    }
    removed.sort();
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn files_the_listing_does_not_name_are_deleted() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("model");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        for file in ["keep", "sub/keep", "old", "sub/old", "keep.partial"] {
            std::fs::write(dir.join(file), b"x").unwrap();
        }
        std::os::unix::fs::symlink("/etc/passwd", dir.join("link")).unwrap();
        let listed = BTreeSet::from(["keep", "sub/keep"]);
        let removed = remove_unlisted(&dir, &listed).await.unwrap();
        assert_eq!(removed, ["keep.partial", "link", "old", "sub/old"]);
        assert!(dir.join("keep").exists() && dir.join("sub/keep").exists());
        assert!(std::path::Path::new("/etc/passwd").exists());
        assert_eq!(
            remove_unlisted(&root.path().join("absent"), &listed)
                .await
                .unwrap(),
            Vec::<String>::new()
        );
    }
}
