//! The project's docs stand on their own: no text cites a specification that is not in the
//! repository (a rules document only its authors have), and every relative Markdown link (and
//! the heading it points to) and every `docs/<name>.md` a file names exists.
// Test code: a panic is the failure report (the workspace denies unwrap elsewhere).
#![allow(clippy::unwrap_used)]
use std::path::{Path, PathBuf};

use vramfit_install_tests::repo_root;

/// Folders that are not the project's text: build outputs, environments, git.
const SKIPPED: [&str; 6] = ["target", ".git", ".venv", ".tools", "node_modules", "build"];
/// Text files worth reading.
const TEXT: [&str; 9] = ["md", "rs", "py", "sh", "yaml", "yml", "toml", "txt", "tpl"];

fn text_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if path.is_dir() {
            if !SKIPPED.contains(&name.as_str()) && !name.starts_with('.') {
                text_files(&path, out);
            }
        } else if path
            .extension()
            .is_some_and(|e| TEXT.contains(&e.to_string_lossy().as_ref()))
        {
            out.push(path);
        }
    }
}

fn project_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    text_files(&repo_root(), &mut files);
    files.sort();
    assert!(files.len() > 50, "read {} files", files.len());
    files
}

fn relative(path: &Path) -> String {
    path.strip_prefix(repo_root())
        .unwrap_or(path)
        .display()
        .to_string()
}

#[test]
fn no_text_cites_a_specification_outside_the_repository() {
    // The words are split so that this file does not cite itself.
    let cited = [
        format!("{}{}", "DOMAIN", " §"),
        format!("{}{}", "DOMAIN", ".md"),
    ];
    let mut found = Vec::new();
    for file in project_files() {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            if cited.iter().any(|c| line.contains(c.as_str())) {
                found.push(format!("{}:{}: {}", relative(&file), n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "cite docs/ instead (move what is needed there):\n{}",
        found.join("\n")
    );
}

/// Relative targets of Markdown links `](target)`, anchors and queries dropped.
fn markdown_links(text: &str) -> Vec<String> {
    let mut links = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        let target = after[..end].split(['#', '?']).next().unwrap_or("").trim();
        if !target.is_empty() && !target.contains("://") && !target.starts_with("mailto:") {
            links.push(target.to_string());
        }
        rest = &after[end.min(after.len())..];
    }
    links
}

#[test]
fn every_linked_file_and_named_doc_exists() {
    let root = repo_root();
    let mut missing = Vec::new();
    for file in project_files() {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        if file.extension().is_some_and(|e| e == "md") {
            let dir = file.parent().unwrap_or(&root);
            for link in markdown_links(&text) {
                if !dir.join(&link).exists() {
                    missing.push(format!("{}: link {link}", relative(&file)));
                }
            }
        }
        // `docs/<name>.md` anywhere (comments, docs, CRD descriptions): from the root.
        let mut rest = text.as_str();
        while let Some(at) = rest.find("docs/") {
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || "/-_.".contains(c)))
                .unwrap_or(tail.len());
            let named = tail[..end].trim_end_matches('.');
            let preceded = rest[..at]
                .chars()
                .last()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '/' || c == '.');
            if !preceded && named.ends_with(".md") && !root.join(named).exists() {
                missing.push(format!("{}: names {named}", relative(&file)));
            }
            rest = &tail[end.max(1)..];
        }
    }
    missing.sort();
    missing.dedup();
    assert!(missing.is_empty(), "missing:\n{}", missing.join("\n"));
}

/// `(target, anchor)` of every relative Markdown link with an anchor (`#x`: target "").
fn anchored_links(text: &str) -> Vec<(String, String)> {
    let mut links = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        let link = &after[..end];
        if let Some((target, anchor)) = link.split_once('#')
            && !target.contains("://")
            && !anchor.is_empty()
        {
            links.push((target.trim().to_string(), anchor.trim().to_string()));
        }
        rest = &after[end.min(after.len())..];
    }
    links
}

/// The anchors a Markdown renderer gives a file's headings, as GitHub makes them: lower
/// case, punctuation dropped, spaces as hyphens (fenced code is no heading).
fn heading_anchors(text: &str) -> Vec<String> {
    let mut anchors = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        let Some(title) = line.strip_prefix('#') else {
            continue;
        };
        if fenced || !title.trim_start_matches('#').starts_with(' ') {
            continue;
        }
        let slug: String = title
            .trim_start_matches('#')
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        anchors.push(slug);
    }
    anchors
}

#[test]
fn every_linked_heading_exists() {
    let root = repo_root();
    let mut missing = Vec::new();
    for file in project_files()
        .into_iter()
        .filter(|f| f.extension().is_some_and(|e| e == "md"))
    {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        let dir = file.parent().unwrap_or(&root);
        for (target, anchor) in anchored_links(&text) {
            let linked = if target.is_empty() {
                file.clone()
            } else {
                dir.join(&target)
            };
            if linked.extension().is_none_or(|e| e != "md") {
                continue;
            }
            let Ok(linked_text) = std::fs::read_to_string(&linked) else {
                continue; // a missing file is every_linked_file_and_named_doc_exists's
            };
            if !heading_anchors(&linked_text).contains(&anchor) {
                missing.push(format!("{}: {target}#{anchor}", relative(&file)));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "links to headings that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn headings_give_github_anchors() {
    let text = "# vramfit\n## GPUs and classes\n```sh\n# not a heading\n```\n### After an out-of-memory failure\n#### `vramfit plan` (dry run)\n#nope\n";
    assert_eq!(
        heading_anchors(text),
        [
            "vramfit",
            "gpus-and-classes",
            "after-an-out-of-memory-failure",
            "vramfit-plan-dry-run"
        ]
    );
    assert_eq!(
        anchored_links("[a](notes/p.md#x-y), [b](#security), [c](https://x.io/#z), [d](e.md)"),
        [
            ("notes/p.md".to_string(), "x-y".to_string()),
            (String::new(), "security".to_string())
        ]
    );
}

#[test]
fn link_targets_are_read_without_anchors() {
    assert_eq!(
        markdown_links("see [a](notes/a.md#x), [b](https://x.io/b.md) and [c](../c.md)"),
        ["notes/a.md", "../c.md"]
    );
}
