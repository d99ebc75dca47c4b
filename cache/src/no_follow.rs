//! File access inside a model's folder that never follows a symbolic link. The folder may be
//! mounted into pods, so anything in it may have been planted: a link to another model's file
//! would otherwise let a read, a resumed download or a deletion reach outside the folder.
//! Every entry is looked at with `lstat`; a file is opened only once `lstat` says it is a
//! regular file, and the open is checked to have reached that same file (device and inode),
//! so a link swapped in between is refused, never read or written through.
use std::io::{Error, ErrorKind};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// What one folder entry is, seen without following it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// Nothing there.
    Absent,
    /// A regular file of this many bytes.
    File(u64),
    /// A real folder.
    Dir,
    /// Anything the cache never writes: a symbolic link, a device, a pipe, a socket.
    Foreign(&'static str),
}

/// `lstat` of `path`.
pub async fn entry_kind(path: &Path) -> std::io::Result<EntryKind> {
    match tokio::fs::symlink_metadata(path).await {
        Ok(meta) => Ok(kind_of(&meta)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(EntryKind::Absent),
        Err(e) => Err(e),
    }
}

fn kind_of(meta: &std::fs::Metadata) -> EntryKind {
    let kind = meta.file_type();
    if kind.is_symlink() {
        EntryKind::Foreign("a symbolic link")
    } else if kind.is_file() {
        EntryKind::File(meta.len())
    } else if kind.is_dir() {
        EntryKind::Dir
    } else {
        EntryKind::Foreign("a device, pipe or socket")
    }
}

fn not_regular(path: &Path, what: &str) -> Error {
    Error::new(
        ErrorKind::InvalidData,
        format!("{} is {what}, not a regular file", path.display()),
    )
}

/// Opens the regular file at `path` with `options`, refusing anything `lstat` does not call a
/// regular file and any open that reached another file than the one `lstat` saw.
async fn open_checked(
    path: &Path,
    options: &tokio::fs::OpenOptions,
) -> std::io::Result<tokio::fs::File> {
    let before = tokio::fs::symlink_metadata(path).await?;
    if let EntryKind::Foreign(what) = kind_of(&before) {
        return Err(not_regular(path, what));
    }
    if !before.is_file() {
        return Err(not_regular(path, "a folder"));
    }
    let file = options.open(path).await?;
    let after = file.metadata().await?;
    if (after.dev(), after.ino()) != (before.dev(), before.ino()) {
        return Err(not_regular(path, "replaced while it was opened"));
    }
    Ok(file)
}

/// Opens the regular file at `path` to read it.
pub async fn open_read(path: &Path) -> std::io::Result<tokio::fs::File> {
    let mut options = tokio::fs::OpenOptions::new();
    options.read(true);
    open_checked(path, &options).await
}

/// Opens the regular file at `path` to append to it.
pub async fn open_append(path: &Path) -> std::io::Result<tokio::fs::File> {
    let mut options = tokio::fs::OpenOptions::new();
    options.append(true);
    open_checked(path, &options).await
}

/// Creates `path` empty: whatever is there (a file, a planted link) is unlinked first, never
/// followed, and the new file is created exclusively (`O_EXCL` does not follow a link either).
pub async fn create_fresh(path: &Path) -> std::io::Result<tokio::fs::File> {
    remove_entry(path).await?;
    tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .await
}

/// Removes whatever is at `path` without following it: a file, a link (not its target), a
/// device, or a folder with everything under it (`remove_dir_all` does not follow links).
pub async fn remove_entry(path: &Path) -> std::io::Result<()> {
    let result = match entry_kind(path).await? {
        EntryKind::Absent => return Ok(()),
        EntryKind::Dir => tokio::fs::remove_dir_all(path).await,
        EntryKind::File(_) | EntryKind::Foreign(_) => tokio::fs::remove_file(path).await,
    };
    match result {
        Err(e) if e.kind() != ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Makes `base/<parts...>` a chain of real folders: a missing one is created, anything else in
/// the way (a link, a file) is removed without being followed and replaced by a folder.
/// `base` itself must exist and is not checked.
pub async fn real_dirs(base: &Path, parts: &[&str]) -> std::io::Result<PathBuf> {
    let mut dir = base.to_path_buf();
    for part in parts {
        dir.push(part);
        match entry_kind(&dir).await? {
            EntryKind::Dir => continue,
            EntryKind::Absent => {}
            EntryKind::File(_) | EntryKind::Foreign(_) => remove_entry(&dir).await?,
        }
        match tokio::fs::create_dir(&dir).await {
            Err(e) if e.kind() != ErrorKind::AlreadyExists => return Err(e),
            _ => {}
        }
        if entry_kind(&dir).await? != EntryKind::Dir {
            return Err(Error::other(format!(
                "{} is not a folder after creating it",
                dir.display()
            )));
        }
    }
    Ok(dir)
}

/// Removes every entry under `dir` that the cache never writes (links, devices, pipes,
/// sockets), without following any; never descends into a link. The `/`-separated paths
/// removed, sorted. A `dir` that is itself not a real folder is removed whole.
pub async fn remove_foreign(dir: &Path) -> std::io::Result<Vec<String>> {
    match entry_kind(dir).await? {
        EntryKind::Absent => return Ok(Vec::new()),
        EntryKind::Dir => {}
        EntryKind::File(_) | EntryKind::Foreign(_) => {
            remove_entry(dir).await?;
            return Ok(vec![".".to_string()]);
        }
    }
    remove_below(dir, |_, kind| matches!(kind, EntryKind::Foreign(_))).await
}

/// Walks the real folder `dir` without following any link, descending only into real
/// folders, and removes every other entry for which `doomed(relative path, kind)` holds;
/// the `/`-separated paths removed, sorted.
pub async fn remove_below(
    dir: &Path,
    doomed: impl Fn(&str, &EntryKind) -> bool,
) -> std::io::Result<Vec<String>> {
    let mut removed = Vec::new();
    let mut folders = vec![(dir.to_path_buf(), String::new())];
    while let Some((folder, prefix)) = folders.pop() {
        let mut entries = tokio::fs::read_dir(&folder).await?;
        while let Some(entry) = entries.next_entry().await? {
            let relative = join(&prefix, &entry.file_name().to_string_lossy());
            match entry_kind(&entry.path()).await? {
                EntryKind::Dir => folders.push((entry.path(), relative)),
                EntryKind::Absent => {}
                kind if doomed(&relative, &kind) => {
                    remove_entry(&entry.path()).await?;
                    removed.push(relative);
                }
                EntryKind::File(_) | EntryKind::Foreign(_) => {}
            }
        }
    }
    removed.sort();
    Ok(removed)
}

/// `prefix/name`, or `name` at the top.
pub fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_link_is_never_opened_written_or_removed_through() {
        let root = tempfile::tempdir().unwrap();
        let other = root.path().join("other");
        std::fs::write(&other, b"another model's file").unwrap();
        let dir = root.path().join("model");
        std::fs::create_dir(&dir).unwrap();
        let link = dir.join("weights.partial");
        std::os::unix::fs::symlink(&other, &link).unwrap();

        assert_eq!(
            entry_kind(&link).await.unwrap(),
            EntryKind::Foreign("a symbolic link")
        );
        let error = open_read(&link).await.unwrap_err();
        assert!(error.to_string().contains("symbolic link"), "{error}");
        assert!(open_append(&link).await.is_err());

        let mut fresh = create_fresh(&link).await.unwrap();
        fresh.write_all(b"download").await.unwrap();
        drop(fresh);
        assert_eq!(std::fs::read(&other).unwrap(), b"another model's file");
        let mut text = String::new();
        open_read(&link)
            .await
            .unwrap()
            .read_to_string(&mut text)
            .await
            .unwrap();
        assert_eq!(text, "download");
    }

    #[tokio::test]
    async fn foreign_entries_are_removed_and_links_to_folders_not_descended() {
        let root = tempfile::tempdir().unwrap();
        let other = root.path().join("other");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("config.json"), b"{}").unwrap();
        let dir = root.path().join("model");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("sub/keep"), b"x").unwrap();
        std::os::unix::fs::symlink(&other, dir.join("linked")).unwrap();
        std::os::unix::fs::symlink(other.join("config.json"), dir.join("sub/config.json")).unwrap();

        let removed = remove_foreign(&dir).await.unwrap();
        assert_eq!(removed, ["linked", "sub/config.json"]);
        assert!(dir.join("sub/keep").exists());
        assert_eq!(std::fs::read(other.join("config.json")).unwrap(), b"{}");

        // A link where a folder must be is replaced by a real folder; the target is untouched.
        std::os::unix::fs::symlink(&other, dir.join("tokenizer")).unwrap();
        let made = real_dirs(&dir, &["tokenizer", "deep"]).await.unwrap();
        assert_eq!(entry_kind(&made).await.unwrap(), EntryKind::Dir);
        assert_eq!(
            entry_kind(&dir.join("tokenizer")).await.unwrap(),
            EntryKind::Dir
        );
        assert!(!other.join("deep").exists());
    }
}
