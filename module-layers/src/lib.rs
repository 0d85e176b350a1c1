//! Test support, no dependencies: the graph of a crate's top-level modules, read from its
//! sources (every `crate::<module>`, `super::<module>` from a top-level module's file, and name
//! the root re-exports that a module's non-test code names), and the cycles in it. Each
//! crate of the workspace has a `module_layers` test that calls [`ensure_layered`], so its
//! modules form layers (no module reaches back to one that depends on it); which crate may use
//! which is the compiler's to enforce (docs/agent.md, "Code layout").

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Module → the modules of the same crate its non-test code names.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// The code of a file before its test module, without comment lines.
pub fn non_test_code(text: &str) -> String {
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    code.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// What the crate root re-exports, `pub use m::{A, B};` or `pub use m::A;`: each name → `m`, so
/// `crate::A` counts as a use of `m`.
pub fn root_reexports(root_code: &str) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for line in root_code.lines().map(str::trim) {
        let Some(path) = line.strip_prefix("pub use ").and_then(|l| l.strip_suffix(';')) else {
            continue;
        };
        let Some((module, items)) = path.split_once("::") else {
            continue;
        };
        if !module
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        {
            continue;
        }
        for item in items.trim_matches(|c| c == '{' || c == '}').split(',') {
            let name = item.rsplit(" as ").next().unwrap_or_default().trim();
            if !name.is_empty() {
                names.insert(name.to_string(), module.to_string());
            }
        }
    }
    names
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The first segment of each item of a `{…}` group (`{a::X, b, C}` → `a`, `b`, `C`), nested
/// groups skipped over.
fn group_heads(group: &str) -> Vec<&str> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut item_start = 0;
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                heads.push(&group[item_start..i]);
                item_start = i + 1;
            }
            _ => {}
        }
    }
    heads.push(&group[item_start..]);
    heads
        .into_iter()
        .map(|item| {
            let item = item.trim();
            let end = item.find(|c: char| !is_ident_char(c)).unwrap_or(item.len());
            &item[..end]
        })
        .filter(|head| !head.is_empty())
        .collect()
}

/// The top-level modules `code` names from the crate root: `crate::<module>`, and, in a file
/// `depth` modules below the root, `super::` written `depth` times (`super::x` in `src/m.rs` or
/// `src/m/mod.rs` is `crate::x`); `{…}` groups count each item; a capitalised name counts as the
/// module the root re-exports it from (`reexports`, [`root_reexports`]).
pub fn crate_references(code: &str, depth: usize, reexports: &BTreeMap<String, String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut at = 0;
    while at < code.len() {
        let rest = &code[at..];
        let preceded = code[..at]
            .chars()
            .next_back()
            .is_some_and(|c| is_ident_char(c) || c == '$' || c == ':');
        let (prefix_len, from_root) = if rest.starts_with("crate::") && !preceded {
            (7, true)
        } else if rest.starts_with("super::") && !preceded {
            let mut supers = 0;
            while rest[supers * 7..].starts_with("super::") {
                supers += 1;
            }
            (supers * 7, supers == depth)
        } else {
            at += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        at += prefix_len;
        if !from_root {
            continue;
        }
        let path = &code[at..];
        let names: Vec<&str> = if let Some(group) = path.strip_prefix('{') {
            let mut depth = 1;
            let end = group
                .char_indices()
                .find(|(_, c)| {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    depth == 0
                })
                .map_or(group.len(), |(i, _)| i);
            group_heads(&group[..end])
        } else {
            let end = path.find(|c: char| !is_ident_char(c)).unwrap_or(path.len());
            vec![&path[..end]]
        };
        for name in names {
            if name.starts_with(|c: char| c.is_ascii_lowercase()) {
                found.insert(name.to_string());
            } else if let Some(module) = reexports.get(name) {
                found.insert(module.clone());
            }
        }
    }
    found
}

/// The graph of the top-level modules under `src` (`lib.rs`, `main.rs` and `bin/` are the
/// crate's root, not modules; `tests.rs` files are test code).
pub fn module_graph(src: &Path) -> std::io::Result<Graph> {
    let mut files = Vec::new();
    rust_files(src, &mut files)?;
    let root = ["lib.rs", "main.rs"]
        .iter()
        .map(|f| src.join(f))
        .find(|p| p.is_file());
    let reexports = match root {
        Some(root) => root_reexports(&non_test_code(&std::fs::read_to_string(root)?)),
        None => BTreeMap::new(),
    };
    let mut graph = Graph::new();
    for file in files {
        let relative = file.strip_prefix(src).expect("found under src");
        if relative.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let parts: Vec<String> = relative
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let module = parts[0].trim_end_matches(".rs").to_string();
        if ["lib", "main", "bin"].contains(&module.as_str()) {
            continue;
        }
        let depth = parts.len() - usize::from(parts.last().is_some_and(|l| l == "mod.rs"));
        let code = non_test_code(&std::fs::read_to_string(&file)?);
        let uses = graph.entry(module.clone()).or_default();
        uses.extend(
            crate_references(&code, depth, &reexports)
                .into_iter()
                .filter(|m| *m != module),
        );
    }
    Ok(graph)
}

/// A path `from` → … → `to` through `graph`, if there is one.
fn path_between(graph: &Graph, from: &str, to: &str) -> Option<Vec<String>> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![vec![from.to_string()]];
    while let Some(path) = stack.pop() {
        let last = path.last().expect("a path is never empty").clone();
        if last == to && path.len() > 1 {
            return Some(path);
        }
        if !seen.insert(last.clone()) {
            continue;
        }
        for next in graph.get(&last).into_iter().flatten() {
            let mut longer = path.clone();
            longer.push(next.clone());
            stack.push(longer);
        }
    }
    None
}

/// Every module that reaches itself, with one such path (`a → b → a`).
pub fn cycles(graph: &Graph) -> Vec<String> {
    graph
        .keys()
        .filter_map(|m| path_between(graph, m, m))
        .map(|p| p.join(" → "))
        .collect()
}

/// Fails naming every cycle among the top-level modules of the crate at `crate_dir`, or a
/// module of `expected` that is not there (so a moved `src` cannot pass as a crate with no
/// cycles).
pub fn ensure_layered(crate_dir: &Path, expected: &[&str]) -> Result<(), String> {
    let src = crate_dir.join("src");
    let graph = module_graph(&src).map_err(|e| format!("reading {}: {e}", src.display()))?;
    let missing: Vec<&&str> = expected.iter().filter(|m| !graph.contains_key(**m)).collect();
    if !missing.is_empty() {
        return Err(format!("no module {missing:?} found in {}", src.display()));
    }
    let found = cycles(&graph);
    if found.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "module cycles in {}:\n{}",
            src.display(),
            found.join("\n")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(&str, &str)]) -> Graph {
        let mut g = Graph::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
        }
        g
    }

    #[test]
    fn the_cycle_finder_finds_a_cycle_and_only_a_cycle() {
        let with_cycle = graph(&[("validate", "render"), ("render", "goal"), ("goal", "validate")]);
        assert_eq!(cycles(&with_cycle).len(), 3);
        assert!(cycles(&with_cycle)[0].contains("goal → validate"));
        let layered = graph(&[("render", "goal"), ("goal", "validate"), ("render", "validate")]);
        assert!(cycles(&layered).is_empty());
    }

    #[test]
    fn references_are_read_from_code_not_comments_tests_or_other_crates() {
        let code = "use crate::render::write;\n// crate::start in a comment\nfn f() { crate::goal::x(); \
                    $crate::paths::y(); other_crate::lab::z() }\n#[cfg(test)]\nmod tests { use crate::lab; }";
        assert_eq!(
            crate_references(&non_test_code(code), 1, &BTreeMap::new()),
            BTreeSet::from(["render".to_string(), "goal".to_string()])
        );
    }

    #[test]
    fn super_from_a_top_level_module_groups_and_reexported_names_count() {
        let reexports = root_reexports(
            "pub mod run;\npub use coredns::{Outcome, SuperviseError};\npub use settings::Settings;",
        );
        assert_eq!(reexports.get("Outcome").map(String::as_str), Some("coredns"));
        assert_eq!(reexports.get("Settings").map(String::as_str), Some("settings"));
        let code = "use super::run::{self, Outcome};\nuse super::{Settings, notify, probe::{a, b}};\nuse crate::Outcome;";
        assert_eq!(
            crate_references(code, 1, &reexports),
            BTreeSet::from(["run", "settings", "notify", "probe", "coredns"].map(String::from))
        );
        // One level down, `super::` is the module itself, `super::super::` the root.
        let below = "use super::sibling;\nuse super::super::lab::Lab;";
        assert_eq!(
            crate_references(below, 2, &reexports),
            BTreeSet::from(["lab".to_string()])
        );
    }

    #[test]
    fn a_crate_with_a_cycle_is_refused_naming_it_and_a_missing_module_too() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path();
        let src = dir.join("src");
        std::fs::create_dir_all(src.join("vm")).unwrap();
        std::fs::write(src.join("lib.rs"), "pub mod vm;\npub mod evidence;\n").unwrap();
        std::fs::write(src.join("vm/mod.rs"), "fn f() { crate::evidence::collect() }\n").unwrap();
        std::fs::write(src.join("evidence.rs"), "use crate::vm::Vm;\n").unwrap();
        let err = ensure_layered(dir, &["vm"]).unwrap_err();
        assert!(err.contains("evidence → vm → evidence"), "{err}");
        std::fs::write(src.join("vm/mod.rs"), "fn f() {}\n").unwrap();
        assert_eq!(ensure_layered(dir, &["vm", "evidence"]), Ok(()));
        // The same cycle through `super::` in a top-level module's file.
        std::fs::write(src.join("vm/mod.rs"), "use super::evidence;\n").unwrap();
        let err = ensure_layered(dir, &["vm"]).unwrap_err();
        assert!(err.contains("evidence → vm → evidence"), "{err}");
        std::fs::write(src.join("vm/mod.rs"), "fn f() {}\n").unwrap();
        let err = ensure_layered(dir, &["lab"]).unwrap_err();
        assert!(err.contains("no module [\"lab\"]"), "{err}");
    }
}
