//! The commands the READMEs give a newcomer: the first one shows cargo's progress on a cold
//! build, and the e2e commands share the test command's build (the workspace's features, and
//! incremental compilation off for every command, not only inside scripts/test.sh).
// Test code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
use vramfit_install_tests::{markdown_section, repo_root};

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn the_first_command_shows_progress() {
    let readme = read("README.md");
    let first = readme
        .lines()
        .find(|l| l.starts_with("cargo run ") && l.contains(" plan "))
        .expect("the README's first command");
    assert!(
        !first
            .split_whitespace()
            .any(|w| w == "-q" || w == "--quiet"),
        "a cold build prints nothing for minutes with -q: {first}"
    );
}

#[test]
fn e2e_commands_share_the_test_build() {
    for doc in ["README.md", "e2e/README.md", "docs/monitoring.md"] {
        for line in read(doc).lines().filter(|l| l.contains("--test e2e")) {
            if let Some(at) = line.find("cargo test") {
                assert!(
                    line[at..].starts_with("cargo test --workspace"),
                    "{doc}: without --workspace the dependencies build again with other features: {line}"
                );
            }
        }
    }
    let manifest = read("Cargo.toml");
    let dev = manifest
        .split("[profile.dev]")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .expect("[profile.dev]");
    assert!(
        dev.contains("\nincremental = false"),
        "[profile.dev]: {dev}"
    );
    assert!(
        !read("scripts/test.sh").contains("CARGO_INCREMENTAL="),
        "scripts/test.sh builds as every other command does"
    );
}

/// The commands of the README's "Two commands" section, one per fenced block.
fn newcomer_commands(readme: &str) -> Vec<String> {
    let section =
        markdown_section(readme, "Two commands").expect("the README's \"Two commands\" section");
    section
        .split("```")
        .skip(1)
        .step_by(2)
        .map(|block| {
            block
                .lines()
                .skip(1)
                .filter(|l| !l.trim().is_empty())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect()
}

#[test]
fn the_readme_gives_a_newcomer_exactly_two_commands() {
    let commands = newcomer_commands(&read("README.md"));
    assert_eq!(commands.len(), 2, "{commands:#?}");
    let plan: Vec<&str> = commands[0].split_whitespace().collect();
    assert_eq!(
        plan[..plan.len() - 1],
        ["cargo", "run", "-p", "vramfit-cli", "--", "plan"],
        "the first command plans an example with no cluster: {}",
        commands[0]
    );
    let example = plan[plan.len() - 1];
    assert!(
        example.starts_with("examples/") && repo_root().join(example).is_file(),
        "{example}: an example of the repository (cli/tests/golden_plans.rs plans every one)"
    );
    assert_eq!(
        commands[1], "./scripts/test.sh",
        "the second runs every test"
    );
    assert!(repo_root().join("scripts/test.sh").is_file());
}

#[test]
fn commands_are_read_from_the_section_only() {
    let readme = "# x\n## Two commands\ntext\n```sh\na b\n```\nmore\n```sh\n\nc\n```\n## Next\n```sh\nd\n```\n";
    assert_eq!(newcomer_commands(readme), ["a b", "c"]);
}
