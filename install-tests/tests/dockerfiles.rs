//! The images' Dockerfiles: base images pinned by digest, and a build stage that copies every
//! workspace crate Cargo needs and nothing else from the repository.
use std::path::Path;

const DOCKERFILES: [&str; 3] = [
    "docker/operator.Dockerfile",
    "docker/agent.Dockerfile",
    "docker/cache-agent.Dockerfile",
];

/// Every image the project builds, and the build arguments that choose its base images
/// (docker/README.md documents each override).
const IMAGES: [(&str, &[&str]); 6] = [
    (
        "docker/operator.Dockerfile",
        &["BUILD_IMAGE", "RUNTIME_IMAGE"],
    ),
    ("docker/agent.Dockerfile", &["BUILD_IMAGE", "RUNTIME_IMAGE"]),
    (
        "docker/cache-agent.Dockerfile",
        &["BUILD_IMAGE", "RUNTIME_IMAGE"],
    ),
    ("workload/examples/captioner/Dockerfile", &["BASE_IMAGE"]),
    ("workload/examples/scripted/Dockerfile", &["BASE_IMAGE"]),
    (
        "workload/examples/llama-server/Dockerfile",
        &["BUILD_IMAGE", "RUNTIME_IMAGE"],
    ),
];

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The workspace members, from the root manifest.
fn workspace_members() -> Vec<String> {
    toml_lite::parse(&read("Cargo.toml")).members
}

#[test]
fn base_images_are_pinned_by_digest() {
    for path in DOCKERFILES {
        let text = read(path);
        let images: Vec<&str> = text
            .lines()
            .filter_map(|line| line.strip_prefix("ARG "))
            .filter(|arg| arg.starts_with("BUILD_IMAGE=") || arg.starts_with("RUNTIME_IMAGE="))
            .collect();
        assert_eq!(
            images.len(),
            2,
            "{path}: BUILD_IMAGE and RUNTIME_IMAGE: {images:?}"
        );
        for image in images {
            let (_, reference) = image.split_once('=').unwrap();
            let digest = reference.split_once("@sha256:").map(|(_, d)| d);
            assert!(
                digest.is_some_and(|d| d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit())),
                "{path}: {image} is not pinned by a sha256 digest"
            );
        }
        let from: Vec<&str> = text.lines().filter(|l| l.starts_with("FROM ")).collect();
        assert_eq!(
            from,
            ["FROM ${BUILD_IMAGE} AS build", "FROM ${RUNTIME_IMAGE}"],
            "{path}: every stage starts from a pinned argument"
        );
    }
}

#[test]
fn the_build_stage_copies_the_workspace_crates_and_nothing_else() {
    let members = workspace_members();
    assert!(members.contains(&"operator".to_string()), "{members:?}");
    for path in DOCKERFILES {
        let text = read(path);
        let mut copied: Vec<String> = text
            .lines()
            .filter_map(|line| line.strip_prefix("COPY "))
            .filter(|args| !args.starts_with("--from="))
            .flat_map(|args| {
                // Every argument but the last (the destination) is a source.
                let words: Vec<&str> = args.split_whitespace().collect();
                let sources = &words[..words.len().saturating_sub(1)];
                sources.iter().map(|s| s.to_string()).collect::<Vec<_>>()
            })
            .collect();
        let mut expected = members.clone();
        expected.extend(["Cargo.toml".to_string(), "Cargo.lock".to_string()]);
        copied.sort();
        expected.sort();
        assert_eq!(copied, expected, "{path}: COPY sources");
    }
}

#[test]
fn every_base_image_is_a_documented_build_argument() {
    let readme = read("docker/README.md");
    for (path, bases) in IMAGES {
        let text = read(path);
        let mut stages: Vec<&str> = vec![];
        let mut used: Vec<&str> = vec![];
        for line in text.lines().filter(|l| l.starts_with("FROM ")) {
            let words: Vec<&str> = line.split_whitespace().collect();
            let base = words[1];
            match base.strip_prefix("${").and_then(|b| b.strip_suffix('}')) {
                Some(arg) => {
                    assert!(
                        bases.contains(&arg),
                        "{path}: {line}: {arg} is not a base argument"
                    );
                    used.push(arg);
                }
                None => assert!(
                    stages.contains(&base),
                    "{path}: {line}: a base that no build argument overrides"
                ),
            }
            if let [_, _, as_, name] = words[..] {
                assert!(as_.eq_ignore_ascii_case("AS"), "{path}: {line}");
                stages.push(name);
            }
        }
        for arg in bases {
            assert!(
                used.contains(arg),
                "{path}: no stage starts FROM ${{{arg}}}"
            );
            assert!(
                readme.contains(&format!("{arg}=")),
                "docker/README.md shows no --build-arg {arg}="
            );
        }
        assert!(
            readme.contains(path),
            "docker/README.md does not name {path}"
        );
        // BuildKit reads <Dockerfile>.dockerignore: the context is the repository root, whose
        // target/ and .venv/ never belong in it.
        let ignore = read(&format!("{path}.dockerignore"));
        for folder in ["target", ".venv", ".git"] {
            assert!(
                ignore.lines().any(|l| l.trim() == folder),
                "{path}.dockerignore does not leave out {folder}"
            );
        }
    }
}

/// Just enough TOML to read `[workspace] members = [...]` (the manifest is ours).
mod toml_lite {
    pub struct Manifest {
        pub members: Vec<String>,
    }

    pub fn parse(text: &str) -> Manifest {
        let start = text
            .find("members = [")
            .expect("[workspace] members in Cargo.toml");
        let rest = &text[start + "members = [".len()..];
        let end = rest.find(']').expect("the members list ends");
        let members = rest[..end]
            .split(',')
            .map(|m| m.trim().trim_matches('"').to_string())
            .filter(|m| !m.is_empty())
            .collect();
        Manifest { members }
    }
}
