//! The agent's top-level modules form layers: no module reaches back to one that depends on it
//! (config and validate below goal, goal below render, start below lifecycle; docs/agent.md,
//! "Code layout"). Read from the sources: every `crate::<module>` a module's non-test code names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file before its test module, without comment lines.
fn non_test_code(text: &str) -> String {
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    code.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn crate_references(code: &str) -> BTreeSet<String> {
    code.match_indices("crate::")
        .map(|(i, m)| {
            code[i + m.len()..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect::<String>()
        })
        .filter(|m| !m.is_empty())
        .collect()
}

fn module_graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut graph = Graph::new();
    for file in files {
        let relative = file.strip_prefix(src).unwrap();
        if relative.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let first = relative
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        if ["lib", "main", "bin"].contains(&module.as_str()) {
            continue;
        }
        let code = non_test_code(&std::fs::read_to_string(&file).unwrap());
        let uses = graph.entry(module.clone()).or_default();
        uses.extend(crate_references(&code).into_iter().filter(|m| *m != module));
    }
    graph
}

/// A path `from` → … → `to` through `graph`, if there is one.
fn path_between(graph: &Graph, from: &str, to: &str) -> Option<Vec<String>> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![vec![from.to_string()]];
    while let Some(path) = stack.pop() {
        let last = path.last().unwrap().clone();
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

fn cycles(graph: &Graph) -> Vec<String> {
    graph
        .keys()
        .filter_map(|m| path_between(graph, m, m))
        .map(|p| p.join(" → "))
        .collect()
}

#[test]
fn no_top_level_module_depends_on_one_that_depends_on_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = module_graph(&src);
    for module in [
        "config",
        "validate",
        "goal",
        "render",
        "start",
        "lifecycle",
        "paths",
    ] {
        assert!(
            graph.contains_key(module),
            "no module {module} found in {}",
            src.display()
        );
    }
    let found = cycles(&graph);
    assert!(
        found.is_empty(),
        "module cycles in agent/src:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_cycle_finder_finds_a_cycle_and_only_a_cycle() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g = Graph::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
        }
        g
    };
    let with_cycle = graph(&[("validate", "render"), ("render", "goal"), ("goal", "validate")]);
    assert_eq!(cycles(&with_cycle).len(), 3);
    assert!(cycles(&with_cycle)[0].contains("goal → validate"));
    let layered = graph(&[("render", "goal"), ("goal", "validate"), ("render", "validate")]);
    assert!(cycles(&layered).is_empty());
    let code = "use crate::render::write;\n// crate::start in a comment\nfn f() { crate::goal::x() }";
    assert_eq!(
        crate_references(&non_test_code(code)),
        BTreeSet::from(["render".to_string(), "goal".to_string()])
    );
}
