//! The operator's layers (operator/README.md, "Layers") hold in its code: every module of
//! `operator/src` stands on one row of the README's table, and its code names only modules on
//! lower rows (`crate::<module>` in a `use` or a path). An import from a lower row to a higher
//! one, or between two modules of one row (peers never import each other), fails this test; so
//! does a circle, which needs one of them, and a module the table does not place.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The README section the table stands in.
const TABLE_START: &str = "<!-- layers: begin -->";
const TABLE_END: &str = "<!-- layers: end -->";

/// Files that only tests compile (their imports are not layered).
fn test_only(relative: &Path) -> bool {
    let name = relative
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    relative.components().any(|c| c.as_os_str() == "tests")
        || name == "tests.rs"
        || name.ends_with("_tests.rs")
        || name.ends_with("_fuzz.rs")
        || name == "testing.rs"
}

/// The rows of the table, top first: each row's modules.
fn parse_table(readme: &str) -> Result<Vec<BTreeSet<String>>, String> {
    let start = readme
        .find(TABLE_START)
        .ok_or(format!("operator/README.md has no `{TABLE_START}`"))?;
    let end = readme[start..]
        .find(TABLE_END)
        .ok_or(format!("operator/README.md has no `{TABLE_END}`"))?;
    let mut rows = Vec::new();
    for line in readme[start..start + end].lines() {
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').collect();
        // | row | layer | modules | what it holds |
        if cells.len() < 3 || cells[0].trim().parse::<u32>().is_err() {
            continue;
        }
        let modules = cells[2]
            .split(',')
            .map(|m| m.trim().trim_matches('`').to_string())
            .filter(|m| !m.is_empty())
            .collect();
        rows.push(modules);
    }
    if rows.is_empty() {
        return Err("the layer table has no rows".into());
    }
    Ok(rows)
}

/// `source` without comments and without inline `#[cfg(test)] mod … { … }` blocks.
fn code_of(source: &str) -> String {
    let mut code = String::new();
    for line in source.lines() {
        let line = line.split("//").next().unwrap_or_default();
        code.push_str(line);
        code.push('\n');
    }
    while let Some(start) = code.find("#[cfg(test)]") {
        let after = &code[start..];
        let Some(open) = after.find(['{', ';']) else {
            break;
        };
        // `#[cfg(test)] mod tests;` declares a file (skipped as a file); a `{` opens a block.
        let end = if after.as_bytes()[open] == b';' {
            start + open + 1
        } else {
            let mut depth = 0usize;
            let mut end = code.len();
            for (i, c) in after[open..].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = start + open + i + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            end
        };
        code.replace_range(start..end, "");
    }
    code
}

/// The first segment of every `crate::` path in `code`, braces of a `use` included.
fn crate_names(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let inner = &group[..group.find('}').unwrap_or(group.len())];
            for item in inner.split(',') {
                names.insert(first_ident(item.trim()));
            }
        } else {
            names.insert(first_ident(rest));
        }
    }
    names.retain(|n| !n.is_empty());
    names
}

fn first_ident(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// The module a file of `src` belongs to: `group/apply.rs` → `group`, `app.rs` → `app`.
fn module_of(relative: &Path) -> String {
    let first = relative.components().next().expect("a path");
    first
        .as_os_str()
        .to_string_lossy()
        .trim_end_matches(".rs")
        .to_string()
}

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a readable folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// Every import that breaks the table: `(from, to, file)` and why.
fn violations(rows: &[BTreeSet<String>], imports: &[(String, String, String)]) -> Vec<String> {
    let row_of: BTreeMap<&str, usize> = rows
        .iter()
        .enumerate()
        .flat_map(|(i, row)| row.iter().map(move |m| (m.as_str(), i)))
        .collect();
    let mut found = Vec::new();
    for (from, to, file) in imports {
        let (Some(&a), Some(&b)) = (row_of.get(from.as_str()), row_of.get(to.as_str())) else {
            continue;
        };
        if a == b {
            found.push(format!(
                "{file}: `{from}` imports `{to}`, a peer on row {} (peers never import each other)",
                a + 1
            ));
        } else if b < a {
            found.push(format!(
                "{file}: `{from}` (row {}) imports `{to}` (row {}), a higher row",
                a + 1,
                b + 1
            ));
        }
    }
    found
}

#[test]
fn every_import_runs_down_the_layer_table() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("operator/README.md");
    let rows = parse_table(&readme).unwrap_or_else(|e| panic!("{e}"));
    let src = root.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeSet<String> = files
        .iter()
        .map(|f| module_of(f.strip_prefix(&src).expect("under src")))
        .filter(|m| m != "lib" && m != "main")
        .collect();
    let placed: BTreeSet<String> = rows.iter().flatten().cloned().collect();
    let test_support = [
        "fixtures",
        "verifier",
        "containment_tests",
        "relist_tests",
        "autoscale_tests",
        "served_adapters_tests",
    ];
    let unplaced: Vec<&String> = modules
        .iter()
        .filter(|m| !placed.contains(*m) && !test_support.contains(&m.as_str()))
        .collect();
    assert!(
        unplaced.is_empty(),
        "modules the layer table in operator/README.md does not place: {unplaced:?}"
    );
    let gone: Vec<&String> = placed.iter().filter(|m| !modules.contains(*m)).collect();
    assert!(
        gone.is_empty(),
        "the layer table names modules that do not exist: {gone:?}"
    );

    let mut imports = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).expect("under src");
        let from = module_of(relative);
        if from == "lib" || from == "main" || test_only(relative) {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(file).expect("a readable file"));
        for to in crate_names(&code) {
            if to != from && modules.contains(&to) {
                imports.push((from.clone(), to, relative.display().to_string()));
            }
        }
    }
    let found = violations(&rows, &imports);
    assert!(
        found.is_empty(),
        "imports against the layers of operator/README.md:\n{}",
        found.join("\n")
    );
}

#[test]
fn an_upward_a_peer_and_a_circular_import_are_each_found() {
    let readme = format!(
        "{TABLE_START}\n| row | layer | modules | holds |\n|---|---|---|---|\n\
         | 1 | top | `a` | |\n| 2 | middle | `b`, `c` | |\n| 3 | ground | `d` | |\n{TABLE_END}"
    );
    let rows = parse_table(&readme).expect("a table");
    assert_eq!(rows.len(), 3);
    let edge = |from: &str, to: &str| (from.to_string(), to.to_string(), format!("{from}.rs"));
    assert!(violations(&rows, &[edge("a", "b"), edge("b", "d")]).is_empty());
    let upward = violations(&rows, &[edge("d", "a")]);
    assert!(upward[0].contains("a higher row"), "{upward:?}");
    let peers = violations(&rows, &[edge("b", "c")]);
    assert!(peers[0].contains("peer"), "{peers:?}");
    // A circle a → b → a needs one upward arrow.
    assert_eq!(
        violations(&rows, &[edge("a", "b"), edge("b", "a")]).len(),
        1
    );
}

#[test]
fn imports_are_read_from_code_not_from_comments_or_test_blocks() {
    let source = "//! see [`crate::doc_only`]\nuse crate::{alpha::X, beta};\n\
                  use crate::gamma::{\n    y,\n};\nfn f() { crate::delta::g(); } // crate::comment\n\
                  #[cfg(test)]\nmod tests {\n    use crate::test_only;\n    fn h() { if true { } }\n}\n\
                  #[cfg(test)]\nmod more;\nfn after() { crate::epsilon::z(); }\n";
    let names = crate_names(&code_of(source));
    let expected: BTreeSet<String> = ["alpha", "beta", "gamma", "delta", "epsilon"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(names, expected);
    assert!(test_only(Path::new("group/tests.rs")));
    assert!(test_only(Path::new("batch/tests/mod.rs")));
    assert!(!test_only(Path::new("group/apply.rs")));
    assert_eq!(module_of(Path::new("group/apply.rs")), "group");
    assert_eq!(module_of(Path::new("app.rs")), "app");
}
