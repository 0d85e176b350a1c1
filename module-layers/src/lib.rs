//! Test support, no dependencies: the graph of a crate's top-level modules, read from its
//! sources (every `crate::<module>` a module's non-test code names), and the cycles in it. Each
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

/// The top-level modules `code` names as `crate::<module>`.
pub fn crate_references(code: &str) -> BTreeSet<String> {
    code.match_indices("crate::")
        .filter(|(i, _)| {
            // `$crate::` (a macro's) and `some_crate::` are not this crate's paths.
            !code[..*i]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
        })
        .map(|(i, m)| {
            code[i + m.len()..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect::<String>()
        })
        .filter(|m| !m.is_empty())
        .collect()
}

/// The graph of the top-level modules under `src` (`lib.rs`, `main.rs` and `bin/` are the
/// crate's root, not modules; `tests.rs` files are test code).
pub fn module_graph(src: &Path) -> std::io::Result<Graph> {
    let mut files = Vec::new();
    rust_files(src, &mut files)?;
    let mut graph = Graph::new();
    for file in files {
        let relative = file.strip_prefix(src).expect("found under src");
        if relative.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let first = relative
            .components()
            .next()
            .expect("a relative path has a component");
        let module = first
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if ["lib", "main", "bin"].contains(&module.as_str()) {
            continue;
        }
        let code = non_test_code(&std::fs::read_to_string(&file)?);
        let uses = graph.entry(module.clone()).or_default();
        uses.extend(crate_references(&code).into_iter().filter(|m| *m != module));
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
            crate_references(&non_test_code(code)),
            BTreeSet::from(["render".to_string(), "goal".to_string()])
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
        let err = ensure_layered(dir, &["lab"]).unwrap_err();
        assert!(err.contains("no module [\"lab\"]"), "{err}");
    }
}
