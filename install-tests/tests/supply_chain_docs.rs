//! The documents that describe vramfit's base images say what the Dockerfiles do:
//! docs/supply-chain.md lists each `BUILD_IMAGE`/`RUNTIME_IMAGE` with its digest, and
//! docker/README.md names the same images, pinned by digest.
// Test code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
use std::collections::BTreeMap;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// `ARG BUILD_IMAGE=…` and `ARG RUNTIME_IMAGE=…` of every `docker/*.Dockerfile`:
/// (Dockerfile, argument) → image reference.
fn dockerfile_images() -> BTreeMap<(String, String), String> {
    let mut files: Vec<_> = std::fs::read_dir(root().join("docker"))
        .expect("docker/")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "Dockerfile"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no docker/*.Dockerfile");
    let mut images = BTreeMap::new();
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&file).unwrap();
        for line in text.lines() {
            let Some((arg, image)) = line.strip_prefix("ARG ").and_then(|a| a.split_once('='))
            else {
                continue;
            };
            if arg.ends_with("_IMAGE") {
                images.insert((name.clone(), arg.to_string()), image.trim().to_string());
            }
        }
    }
    images
}

/// The rows `| `ARG` | `image` |` of docs/supply-chain.md's base-image table.
fn documented_images() -> BTreeMap<String, String> {
    read("docs/supply-chain.md")
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line
                .trim()
                .strip_prefix('|')?
                .strip_suffix('|')?
                .split('|')
                .map(|c| c.trim().trim_matches('`'))
                .collect();
            match cells.as_slice() {
                [arg, image] if arg.ends_with("_IMAGE") => {
                    Some((arg.to_string(), image.to_string()))
                }
                _ => None,
            }
        })
        .collect()
}

#[test]
fn supply_chain_lists_the_dockerfiles_base_images_with_their_digests() {
    let documented = documented_images();
    assert!(
        !documented.is_empty(),
        "docs/supply-chain.md has no table of base images"
    );
    for ((file, arg), image) in dockerfile_images() {
        assert!(
            image.contains("@sha256:"),
            "{file}: {arg}={image} has no digest"
        );
        assert_eq!(
            documented.get(&arg),
            Some(&image),
            "docs/supply-chain.md's {arg} is not docker/{file}'s"
        );
    }
    let supply_chain = read("docs/supply-chain.md");
    assert!(
        !supply_chain.contains("not pinned by digest"),
        "docs/supply-chain.md still says the base images are not pinned"
    );
}

#[test]
fn docker_readme_names_the_base_images_it_pins() {
    let readme = read("docker/README.md");
    assert!(readme.contains("pinned by digest"), "docker/README.md");
    for ((file, arg), image) in dockerfile_images() {
        let tag = image.split('@').next().unwrap_or_default();
        assert!(
            readme.contains(&format!("`{tag}")),
            "docker/README.md does not name docker/{file}'s {arg} image {tag}"
        );
        assert!(
            readme.contains(&format!("`{arg}`")),
            "{arg} in docker/README.md"
        );
    }
}
