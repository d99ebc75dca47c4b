//! The folder vramfit mounts a tuning job's volumes under (`/vramfit/data`, `/vramfit/output`)
//! is vramfit's alone: a pod mount at it or under it, however spelled, is refused. Paths are
//! compared after lexical cleaning, since the container runtime resolves `/vramfit/./data`,
//! `//vramfit/output` or `/x/../vramfit` to the same place.
/// The folder every tuning mount of vramfit is under.
pub const RESERVED_ROOT: &str = "/vramfit";

/// Whether a pod mount at `path` would be at or under [`RESERVED_ROOT`]. A relative path counts
/// from the container's root, as the runtime joins it there.
pub fn is_reserved(path: &str) -> bool {
    let cleaned = clean(path);
    cleaned == RESERVED_ROOT
        || cleaned
            .strip_prefix(RESERVED_ROOT)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// `path` rooted at `/` and cleaned lexically (as Go's `path.Clean`): repeated slashes are one,
/// `.` elements go, `..` removes the element before it (and at the root stays at the root),
/// no trailing slash except the root itself.
pub fn clean(path: &str) -> String {
    let mut elements: Vec<&str> = Vec::new();
    for element in path.split('/') {
        match element {
            "" | "." => {}
            ".." => {
                elements.pop();
            }
            name => elements.push(name),
        }
    }
    format!("/{}", elements.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use vramfit_api::tuning::{DATA_MOUNT_PATH, OUTPUT_MOUNT_PATH};

    #[test]
    fn vramfits_own_mounts_are_under_the_reserved_folder() {
        for path in [DATA_MOUNT_PATH, OUTPUT_MOUNT_PATH] {
            assert!(is_reserved(path), "{path}");
            assert_eq!(clean(path), path, "{path} is written clean");
        }
    }

    #[test]
    fn any_spelling_at_or_under_the_folder_is_reserved() {
        for path in [
            "/vramfit",
            "/vramfit/",
            "/vramfit/data",
            "/vramfit/./data",
            "//vramfit/output",
            "/vramfit/models",
            "/vramfit/data/sub",
            "/x/../vramfit",
            "/../vramfit/output",
            "/vramfit/.",
            "/vramfit/data/..",
            "vramfit/output",
            "/./vramfit//models/",
        ] {
            assert!(is_reserved(path), "{path} ({})", clean(path));
        }
    }

    #[test]
    fn neighbours_of_the_folder_are_not_reserved() {
        for path in [
            "/",
            "/vramfit2",
            "/vramfit-cache",
            "/data",
            "/vramfit/..",
            "/vramfit/../data",
            "/opt/vramfit",
            "/cache/vramfit/data",
        ] {
            assert!(!is_reserved(path), "{path} ({})", clean(path));
        }
    }

    #[test]
    fn cleaning_matches_gos_path_clean() {
        for (path, cleaned) in [
            ("", "/"),
            ("/", "/"),
            ("//a//b/", "/a/b"),
            ("/a/./b/.", "/a/b"),
            ("/a/b/../c", "/a/c"),
            ("/../../a", "/a"),
            ("a/b", "/a/b"),
        ] {
            assert_eq!(clean(path), cleaned, "{path}");
        }
    }
}
