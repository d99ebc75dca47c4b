//! e2e/README.md's scenario table lists the scenarios `tests/e2e.rs` registers, in the order
//! they run, each with the file that holds it.
use std::path::Path;

fn read(path: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `(name, file)` of each `("name", |s| Box::pin(module::function(s)))` entry.
fn registered(source: &str) -> Vec<(String, String)> {
    let mut scenarios = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find("(\"") {
        let tail = &rest[at + 2..];
        let Some(quote) = tail.find('"') else { break };
        let name = &tail[..quote];
        let after = &tail[quote + 1..];
        rest = after;
        let Some(entry) = after.strip_prefix(", |s|") else {
            continue;
        };
        let module = entry
            .split("Box::pin(")
            .nth(1)
            .and_then(|call| call.split("::").next())
            .unwrap_or("")
            .trim();
        scenarios.push((name.to_string(), format!("{module}.rs")));
    }
    scenarios
}

/// `(name, file)` of each README row whose second cell is a scenario file.
fn documented(readme: &str) -> Vec<(String, String)> {
    readme
        .lines()
        .filter_map(|row| {
            let cells: Vec<&str> = row.split(" | ").collect();
            let name = cells.first()?.strip_prefix("| `")?.strip_suffix('`')?;
            let file = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            file.ends_with(".rs")
                .then(|| (name.to_string(), file.to_string()))
        })
        .collect()
}

#[test]
fn the_readme_table_is_the_registered_scenarios_in_order() {
    let registered = registered(&read("tests/e2e.rs"));
    assert!(registered.len() > 20, "{registered:?}");
    for (name, file) in &registered {
        assert!(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/scenarios")
                .join(file)
                .is_file(),
            "{name}: tests/scenarios/{file}"
        );
    }
    let documented = documented(&read("README.md"));
    let first = (0..documented.len().max(registered.len()))
        .find(|&i| documented.get(i) != registered.get(i));
    if let Some(i) = first {
        panic!(
            "e2e/README.md's scenario table, row {}: {:?}; tests/e2e.rs registers {:?} there",
            i + 1,
            documented.get(i),
            registered.get(i)
        );
    }
}

#[test]
fn entries_and_rows_are_read() {
    let source = r#"vec![("a-b", |s| {
            Box::pin(one::a(s))
        }),
        ("c", |s| Box::pin(two::c(s))),
        println!("{}", x);"#;
    assert_eq!(
        registered(source),
        [
            ("a-b".to_string(), "one.rs".to_string()),
            ("c".to_string(), "two.rs".to_string())
        ]
    );
    let readme = "| `a-b` | `one.rs` | x |\n| `check` | y `z` |\n| `c` | `two.rs` | w |\n";
    assert_eq!(
        documented(readme),
        [
            ("a-b".to_string(), "one.rs".to_string()),
            ("c".to_string(), "two.rs".to_string())
        ]
    );
}
