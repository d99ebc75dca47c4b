//! `--serve-read-only`: makes `<root>/served` a read-only bind mount of `<root>/models`, the
//! folder the operator's model volumes point into (docs/model-cache.md, "Threat model"). A
//! container that mounts a model's folder read-write, even as root, then gets `EROFS`: a bind
//! mount of a folder inside a read-only mount is a clone of that mount and keeps its read-only
//! flag (runc binds a volume with `MS_BIND|MS_REC` and remounts only to add flags), and only
//! `CAP_SYS_ADMIN` could remount it.
//!
//! The chart's privileged init container runs this with `mountPropagation: Bidirectional` on
//! the cache root, so that the mount reaches the node. Mount flags never propagate (a remount
//! changes one copy only), so the read-only mount is made on a private staging folder first
//! and bound from there: every copy the node and later containers see is read-only from its
//! birth. Idempotent: a read-only mount of `models/` already there is kept; a read-write one is
//! unmounted and made again.
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rustix::fs::{StatVfsMountFlags, statvfs};
use rustix::mount::{MountFlags, UnmountFlags, mount_bind, mount_remount, unmount};
use thiserror::Error;
use vramfit_cache::layout::Layout;

/// Read-write mounts of `models/` stacked on `served/` that are taken off before giving up.
const MAX_STACKED: usize = 8;

/// What [`serve_read_only`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    /// `served/` already was a read-only mount of `models/`: nothing changed.
    AlreadyReadOnly,
    /// `served/` is now a read-only mount of `models/` (`removed`: read-write mounts of
    /// `models/` taken off it first).
    Mounted {
        /// How many read-write mounts were taken off.
        removed: usize,
    },
}

/// Why the read-only mount could not be made.
#[derive(Debug, Error)]
pub enum ServeError {
    /// A filesystem call failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// On what.
        path: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// `served/` is not a folder (a link, a file).
    #[error("{0} is not a folder")]
    NotAFolder(String),
    /// The mount was made but does not read back as a read-only mount of `models/`.
    #[error("{0} is not a read-only mount of the models folder after mounting it")]
    NotReadOnly(String),
}

fn io_error<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> ServeError + 'a {
    move |source| ServeError::Io {
        what,
        path: path.display().to_string(),
        source,
    }
}

/// Whether `served` shows the very folder `models` is (a bind mount of it).
fn shows(served: &Path, models: &Path) -> Result<bool, ServeError> {
    let served = fs::metadata(served).map_err(io_error("reading", served))?;
    let models = fs::metadata(models).map_err(io_error("reading", models))?;
    Ok(served.dev() == models.dev() && served.ino() == models.ino())
}

/// Whether `path` lies on a read-only mount.
pub fn is_read_only(path: &Path) -> Result<bool, ServeError> {
    let stat = statvfs(path).map_err(|e| io_error("statvfs", path)(e.into()))?;
    Ok(stat.f_flag.contains(StatVfsMountFlags::RDONLY))
}

/// Creates `models/` (owned as the cache root is, so the agent can write it) and `served/`.
fn make_folders(layout: &Layout) -> Result<(PathBuf, PathBuf), ServeError> {
    let (root, models, served) = (layout.root(), layout.models_dir(), layout.served_dir());
    if !models.exists() {
        fs::create_dir_all(&models).map_err(io_error("creating", &models))?;
        let owner = fs::metadata(root).map_err(io_error("reading", root))?;
        std::os::unix::fs::chown(&models, Some(owner.uid()), Some(owner.gid()))
            .map_err(io_error("chown", &models))?;
    }
    match fs::symlink_metadata(&served) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err(ServeError::NotAFolder(served.display().to_string())),
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            fs::create_dir(&served).map_err(io_error("creating", &served))?;
        }
        Err(error) => return Err(io_error("reading", &served)(error)),
    }
    Ok((models, served))
}

/// Makes `<root>/served` a read-only (and `nosuid`, `nodev`) bind mount of `<root>/models`,
/// staging it in a folder made under `stage_parent` (a mount that does not propagate: the
/// chart's init container uses its `emptyDir` at `/tmp`).
pub fn serve_read_only(root: &Path, stage_parent: &Path) -> Result<Served, ServeError> {
    let layout = Layout::new(root);
    let (models, served) = make_folders(&layout)?;
    let mut removed = 0;
    while shows(&served, &models)? {
        if is_read_only(&served)? {
            return Ok(Served::AlreadyReadOnly);
        }
        if removed == MAX_STACKED {
            return Err(ServeError::NotReadOnly(served.display().to_string()));
        }
        unmount(&served, UnmountFlags::DETACH)
            .map_err(|e| io_error("unmounting", &served)(e.into()))?;
        removed += 1;
    }
    let stage = stage_parent.join(format!("vramfit-serve-{}", std::process::id()));
    fs::create_dir_all(&stage).map_err(io_error("creating", &stage))?;
    let made = stage_and_bind(&models, &stage, &served);
    // The staging mount goes whatever happened; the node keeps the one on `served/`.
    let _ = unmount(&stage, UnmountFlags::DETACH);
    let _ = fs::remove_dir(&stage);
    made?;
    if !shows(&served, &models)? || !is_read_only(&served)? {
        return Err(ServeError::NotReadOnly(served.display().to_string()));
    }
    Ok(Served::Mounted { removed })
}

/// Binds `models` on `stage`, makes that read-only, and binds it on `served`.
fn stage_and_bind(models: &Path, stage: &Path, served: &Path) -> Result<(), ServeError> {
    mount_bind(models, stage).map_err(|e| io_error("bind-mounting on", stage)(e.into()))?;
    let flags = MountFlags::BIND | MountFlags::RDONLY | MountFlags::NOSUID | MountFlags::NODEV;
    mount_remount(stage, flags, "")
        .map_err(|e| io_error("remounting read-only", stage)(e.into()))?;
    mount_bind(stage, served).map_err(|e| io_error("bind-mounting on", served)(e.into()))
}

/// The `--serve-read-only` mode: makes the mount (staged under the temporary folder), logs
/// what it found, and says how the process ends.
pub fn run(root: &Path) -> std::process::ExitCode {
    match serve_read_only(root, &std::env::temp_dir()) {
        Ok(served) => {
            tracing::info!(?served, root = %root.display(), "models are served read-only");
            std::process::ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: cannot serve the models read-only: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Takes the read-only mounts of `models/` off `<root>/served` (a cluster's clean-up; the
/// suite's after its real-node scenarios).
pub fn unserve(root: &Path) -> Result<usize, ServeError> {
    let layout = Layout::new(root);
    let (models, served) = (layout.models_dir(), layout.served_dir());
    let mut removed = 0;
    while served.exists() && models.exists() && shows(&served, &models)? && removed < MAX_STACKED {
        unmount(&served, UnmountFlags::DETACH)
            .map_err(|e| io_error("unmounting", &served)(e.into()))?;
        removed += 1;
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether this process may mount (root with CAP_SYS_ADMIN): the mount tests need it.
    fn may_mount(dir: &Path) -> bool {
        let (a, b) = (dir.join("probe-a"), dir.join("probe-b"));
        fs::create_dir_all(&a).unwrap();
        fs::create_dir_all(&b).unwrap();
        let ok = mount_bind(&a, &b).is_ok();
        if ok {
            unmount(&b, UnmountFlags::DETACH).unwrap();
        }
        ok
    }

    #[test]
    fn served_is_a_read_only_view_of_models_that_even_root_cannot_write() {
        let dir = tempfile::tempdir().unwrap();
        if !may_mount(dir.path()) {
            eprintln!("skipped: this process may not mount (needs root with CAP_SYS_ADMIN)");
            return;
        }
        let root = dir.path().join("cache");
        let stage = dir.path().join("stage");
        fs::create_dir_all(root.join("models/o--m/main")).unwrap();
        fs::write(root.join("models/o--m/main/config.json"), b"{}").unwrap();

        let first = serve_read_only(&root, &stage).unwrap();
        assert_eq!(first, Served::Mounted { removed: 0 });
        let file = root.join("served/o--m/main/config.json");
        assert_eq!(fs::read(&file).unwrap(), b"{}");
        let write = fs::write(&file, b"evil").unwrap_err();
        assert_eq!(write.raw_os_error(), Some(30), "EROFS: {write}");
        let rename = fs::rename(&file, root.join("served/o--m/main/x")).unwrap_err();
        assert_eq!(rename.raw_os_error(), Some(30), "EROFS: {rename}");
        let create = fs::write(root.join("served/o--m/new"), b"x").unwrap_err();
        assert_eq!(create.raw_os_error(), Some(30), "EROFS: {create}");
        // The agent still writes models/, and served/ shows it at once.
        fs::write(root.join("models/o--m/main/b.txt"), b"b").unwrap();
        assert_eq!(fs::read(root.join("served/o--m/main/b.txt")).unwrap(), b"b");
        // A bind mount of a model's folder (what a container's volume is) is read-only too.
        let pod = dir.path().join("pod");
        fs::create_dir_all(&pod).unwrap();
        mount_bind(root.join("served/o--m/main"), &pod).unwrap();
        let in_pod = fs::write(pod.join("config.json"), b"evil").unwrap_err();
        unmount(&pod, UnmountFlags::DETACH).unwrap();
        assert_eq!(in_pod.raw_os_error(), Some(30), "EROFS: {in_pod}");
        // Staging leaves nothing behind.
        assert_eq!(fs::read_dir(&stage).unwrap().count(), 0);

        // Again: kept as it is.
        assert_eq!(
            serve_read_only(&root, &stage).unwrap(),
            Served::AlreadyReadOnly
        );
        assert_eq!(unserve(&root).unwrap(), 1);
        assert!(!shows(&root.join("served"), &root.join("models")).unwrap());
    }

    #[test]
    fn a_read_write_mount_on_served_is_replaced_by_a_read_only_one() {
        let dir = tempfile::tempdir().unwrap();
        if !may_mount(dir.path()) {
            eprintln!("skipped: this process may not mount (needs root with CAP_SYS_ADMIN)");
            return;
        }
        let root = dir.path().join("cache");
        fs::create_dir_all(root.join("models")).unwrap();
        fs::create_dir_all(root.join("served")).unwrap();
        mount_bind(root.join("models"), root.join("served")).unwrap();
        assert!(!is_read_only(&root.join("served")).unwrap());

        let served = serve_read_only(&root, &dir.path().join("stage")).unwrap();
        assert_eq!(served, Served::Mounted { removed: 1 });
        assert!(is_read_only(&root.join("served")).unwrap());
        assert_eq!(unserve(&root).unwrap(), 1);
    }

    #[test]
    fn a_missing_models_folder_is_made_for_the_roots_owner_and_a_linked_served_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("cache");
        fs::create_dir_all(&root).unwrap();
        std::os::unix::fs::symlink(dir.path(), root.join("served")).unwrap();
        let error = serve_read_only(&root, &dir.path().join("stage")).unwrap_err();
        assert!(matches!(error, ServeError::NotAFolder(_)), "{error}");
        let models = fs::metadata(root.join("models")).unwrap();
        let owner = fs::metadata(&root).unwrap();
        assert_eq!((models.uid(), models.gid()), (owner.uid(), owner.gid()));
    }
}
