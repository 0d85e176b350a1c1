//! Property tests of the config loader and validator (`agent::validate::parse`): arbitrary
//! JSON-ish values, broken JSON text and structured mutations of the checked-in render configs
//! never panic, give the same answer twice, and every rejection is one line per problem that
//! starts with the JSON path of the problem (`LocalDNS.NodeListenerIP: …`, `<root>: …`).
//!
//! A failing case is kept in `prop_config.proptest-regressions` beside this file and replayed
//! first by every run (`cargo nextest run -p agent --test prop_config`); see `prop_support`.

mod prop_support;

use std::sync::LazyLock;

use agent::validate::{Problem, Problems, parse, parse_value};
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::Value;

/// Every field name of the config schema (objects and leaves), and the keys of
/// `Kubelet.Configuration` the validator reads.
const FIELD_NAMES: &[&str] = &[
    "MachineName",
    "NodeName",
    "Cluster",
    "CaCertBase64",
    "ClusterDNS",
    "Version",
    "Kubelet",
    "ApiServer",
    "Auth",
    "BootstrapToken",
    "Labels",
    "RegisterWithTaints",
    "NodeIP",
    "Configuration",
    "podCIDR",
    "apiVersion",
    "kind",
    "Downloads",
    "Kubernetes",
    "CoreDNS",
    "URL",
    "BaseURL",
    "MachineImage",
    "SHA256",
    "ContainerImages",
    "Ref",
    "OfflineArtifacts",
    "Source",
    "HostPrefix",
    "LocalDNS",
    "Enabled",
    "NodeListenerIP",
    "ClusterListenerIP",
    "MetricsAddress",
    "CPULimitInMilliCores",
    "MemoryLimitInMB",
    "RequiredPlugins",
    "CorefileTemplate",
    "NOTRACKReplies",
];

/// The fields a node cannot join without (docs/configuration.md).
const REQUIRED: &[&str] = &[
    "NodeName",
    "Cluster.CaCertBase64",
    "Cluster.ClusterDNS",
    "Kubelet.ApiServer",
    "Kubelet.Auth.BootstrapToken",
];

/// Objects whose keys are fixed by the schema: a key not in it is an unknown field.
const STRUCT_OBJECTS: &[&str] = &[
    "",
    "Cluster",
    "Kubelet",
    "Kubelet.Auth",
    "Downloads",
    "Downloads.Kubernetes",
    "Downloads.CoreDNS",
    "MachineImage",
    "OfflineArtifacts",
    "LocalDNS",
];

/// Values that sit on the edges of the rules.
const EDGE_STRINGS: &[&str] = &[
    "",
    " ",
    "\t",
    "\n",
    "a\nb",
    "\u{0}",
    "\u{1b}[31m",
    "ÿ",
    "😀",
    "-1",
    "1.5",
    "node1",
    "Node_1",
    "127.0.0.1",
    "127.0.0.53",
    "0.0.0.0",
    "255.255.255.255",
    "224.0.0.1",
    "169.254.10.10",
    "169.254.10.11",
    "10.96.0.10",
    "192.168.100.10",
    "fd00::1",
    "::",
    "1.2.3",
    "1.2.3.4.5",
    "01.2.3.4",
    "10.0.0.1:0",
    "10.0.0.1:9253",
    "10.0.0.1:65536",
    "0.0.0.0:9253",
    ":9253",
    "10.0.0.1,fd00::10",
    "10.0.0.1,",
    "https://",
    "https:///x",
    "https://x y",
    "http://10.0.0.1:6443",
    "https://10.0.0.1:6443/",
    "file:///tmp/x",
    "/srv/bundle",
    "relative/path",
    "abcdef.0123456789abcdef",
    "ABCDEF.0123456789abcdef",
    "abcdef0123456789abcdef",
    "0000000000000000000000000000000000000000000000000000000000000000",
    "zz00000000000000000000000000000000000000000000000000000000000000",
    "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJmYWtlCi0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K",
    "not base64!",
    "v1.35.0",
    "v",
    "1.15.0",
    "a=b:NoSchedule",
    "a:Sometimes",
    "=:NoExecute",
    "example.com/role",
    "/role",
    "a/b/c",
    "10.244.0.0/16",
    "10.244.1.1/24",
    "10.0.0.0/33",
    "10.0.0.0/x",
    "kubelet.config.k8s.io/v1beta1",
    "KubeletConfiguration",
    "bind",
    "BIND",
    " hosts ",
    "k8s_external",
    "9lives",
    "{{ nope }}",
    "{% for u in upstreams %}",
    "{{ node_listener }}",
    "}",
    ".:53 {\n bind {{ node_listener }}\n prometheus {{ metrics_address }}\n}\n",
];

/// The valid configs checked in for the render tests (`agent/tests/render/**/*.json`).
static SAMPLES: LazyLock<Vec<Value>> = LazyLock::new(|| {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/render");
    let mut samples = Vec::new();
    for dir in [root.clone(), root.join("start")] {
        let mut paths: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        paths.sort();
        for path in paths {
            let case: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let config = case["config"].clone();
            if let Err(p) = parse_value(config.clone()) {
                panic!("{} is not a valid config:\n{p}", path.display());
            }
            samples.push(config);
        }
    }
    assert!(samples.len() >= 6, "too few sample configs: {}", samples.len());
    samples
});

fn string() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(EDGE_STRINGS).prop_map(str::to_owned),
        1 => "(?s).{0,12}",
        1 => prop::sample::select(vec![63usize, 64, 65, 253, 254]).prop_map(|n| "a".repeat(n)),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(FIELD_NAMES).prop_map(str::to_owned),
        1 => "(?s).{0,8}",
    ]
}

fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        prop::sample::select(vec![
            0i64,
            1,
            -1,
            4_294_967_295,
            4_294_967_296,
            i64::MAX,
            i64::MIN
        ])
        .prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f).map(Value::Number)),
        string().prop_map(Value::String),
    ]
}

/// Any JSON value, with keys mostly from the schema so that it reaches the rules.
fn json() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(key(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Mostly objects (what a config is), sometimes anything.
fn json_root() -> impl Strategy<Value = Value> {
    prop_oneof![
        4 => prop::collection::btree_map(key(), json(), 0..8)
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        1 => json(),
    ]
}

/// One change to a valid config, at a place chosen among all of its places.
#[derive(Debug, Clone)]
enum Mutation {
    Remove(Index),
    Replace(Index, Value),
    /// A key that is not a field, added to one of the schema's objects.
    AddUnknown(Index, String, Value),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        1 => any::<Index>().prop_map(Mutation::Remove),
        3 => (any::<Index>(), json()).prop_map(|(i, v)| Mutation::Replace(i, v)),
        3 => (any::<Index>(), scalar()).prop_map(|(i, v)| Mutation::Replace(i, v)),
        1 => (any::<Index>(), "(?s).{0,8}".prop_filter("not a field", |k| !FIELD_NAMES.contains(&k.as_str())), scalar())
            .prop_map(|(i, k, v)| Mutation::AddUnknown(i, k, v)),
    ]
}

/// A place in a JSON value: the keys and indices leading to it.
#[derive(Debug, Clone, PartialEq)]
enum Seg {
    Key(String),
    Index(usize),
}

/// Every place below the root of `v`.
fn places(v: &Value, at: &mut Vec<Seg>, out: &mut Vec<Vec<Seg>>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                at.push(Seg::Key(k.clone()));
                out.push(at.clone());
                places(child, at, out);
                at.pop();
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                at.push(Seg::Index(i));
                out.push(at.clone());
                places(child, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

fn get_mut<'a>(v: &'a mut Value, path: &[Seg]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |v, seg| match (seg, v) {
        (Seg::Key(k), Value::Object(m)) => m.get_mut(k),
        (Seg::Index(i), Value::Array(a)) => a.get_mut(*i),
        _ => None,
    })
}

fn get<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.as_object()?.get(*k))
}

/// The path as problems write it: `Kubelet.Auth`, `ContainerImages[1].Ref`.
fn written(path: &[Seg]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) if s.is_empty() => s.push_str(k),
            Seg::Key(k) => {
                s.push('.');
                s.push_str(k);
            }
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

/// Applies `m`; for an unknown key, returns the object it was added to and the key.
fn apply(config: &mut Value, m: &Mutation) -> Option<(Vec<Seg>, String)> {
    let mut all = Vec::new();
    places(config, &mut Vec::new(), &mut all);
    if all.is_empty() {
        return None;
    }
    match m {
        Mutation::Remove(i) => {
            let path = i.get(&all).clone();
            let (last, parent) = path.split_last().unwrap();
            match (last, get_mut(config, parent).unwrap()) {
                (Seg::Key(k), Value::Object(o)) => {
                    o.remove(k);
                }
                (Seg::Index(i), Value::Array(a)) => {
                    a.remove(*i);
                }
                _ => unreachable!("a place's parent holds it"),
            }
            None
        }
        Mutation::Replace(i, v) => {
            let path: &Vec<Seg> = i.get(&all);
            *get_mut(config, path).unwrap() = v.clone();
            None
        }
        Mutation::AddUnknown(i, key, v) => {
            let mut objects: Vec<Vec<Seg>> = vec![Vec::new()];
            objects.extend(
                all.into_iter()
                    .filter(|p| STRUCT_OBJECTS.contains(&written(p).as_str())),
            );
            let path = i.get(&objects).clone();
            let target = get_mut(config, &path).unwrap();
            target.as_object_mut()?.insert(key.clone(), v.clone());
            Some((path, key.clone()))
        }
    }
}

/// How a problem's path is shown: `<root>` for the root, control characters escaped.
fn shown(path: &str) -> String {
    if path.is_empty() {
        return "<root>".into();
    }
    path.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Whether `path` leads through `input` (keys joined by `.`, list indices as `[n]`), ending
/// either at a value the input holds or at schema fields the input leaves out (`is required`).
fn names_a_place(input: &Value, path: &str) -> bool {
    fn walk(v: &Value, rest: &str, first: bool) -> bool {
        if rest.is_empty() {
            return true;
        }
        if let (Some((n, after)), Value::Array(a)) =
            (rest.strip_prefix('[').and_then(|r| r.split_once(']')), v)
        {
            return n
                .parse::<usize>()
                .is_ok_and(|n| a.get(n).is_some_and(|e| walk(e, after, false)));
        }
        let r = if first {
            rest
        } else {
            match rest.strip_prefix('.') {
                Some(r) => r,
                None => return false,
            }
        };
        if let Value::Object(m) = v {
            for (k, child) in m {
                if let Some(after) = r.strip_prefix(k.as_str())
                    && (after.is_empty() || after.starts_with(['.', '[']))
                    && walk(child, after, false)
                {
                    return true;
                }
            }
        }
        r.split('.').all(|s| FIELD_NAMES.contains(&s))
    }
    walk(input, path, true)
}

/// The format of a rejection: one line per problem, each `<path>: <message>`, the path naming a
/// place of the input.
fn check_problems(input: &Value, problems: &Problems) -> Result<(), TestCaseError> {
    prop_assert!(!problems.is_empty(), "a rejection names at least one problem");
    let text = problems.to_string();
    let lines: Vec<String> = text.split('\n').map(str::to_owned).collect();
    prop_assert_eq!(lines.len(), problems.0.len(), "one line per problem:\n{}", text);
    for (Problem { path, message }, line) in problems.iter().zip(&lines) {
        prop_assert!(
            line.starts_with(&format!("{}: ", shown(path))),
            "{:?} does not start with its path {:?}",
            line,
            path
        );
        prop_assert!(!message.trim().is_empty(), "{:?} has no message", line);
        prop_assert!(
            names_a_place(input, path),
            "{:?}: the path names no place of the input {}",
            line,
            input
        );
        prop_assert!(
            !path.is_empty() || !input.is_object() || input.as_object().unwrap().contains_key(""),
            "{:?}: a problem inside an object is reported at the root",
            line
        );
    }
    Ok(())
}

/// Parses `input` as a value and as its JSON text: both give the same answer (so the same
/// input gives the same answer twice). Returns the problems, checked, if it is refused.
fn parse_both_ways(input: &Value) -> Result<Option<Problems>, TestCaseError> {
    let first = parse_value(input.clone());
    let text = input.to_string();
    let reread: Value = serde_json::from_str(&text).unwrap();
    if reread == *input {
        prop_assert_eq!(&first, &parse(&text), "text and value disagree");
    } else {
        // serde_json reads some floats back a last digit off: compare with that value.
        prop_assert_eq!(parse(&text), parse_value(reread), "text and value disagree");
    }
    match first {
        Ok(_) => Ok(None),
        Err(problems) => {
            check_problems(input, &problems)?;
            Ok(Some(problems))
        }
    }
}

/// Whether a problem is reported at `path` or at a place containing it.
fn reported_at_or_above(problems: &Problems, path: &str) -> bool {
    problems.iter().any(|p| {
        p.path == path
            || path.starts_with(&format!("{}.", p.path))
            || path.starts_with(&format!("{}[", p.path))
    })
}

proptest! {
    #![proptest_config(prop_support::config())]

    #[test]
    fn any_json_value_is_a_config_or_problems_each_on_a_line_starting_with_its_path(input in json_root()) {
        let _ = parse_both_ways(&input)?;
    }

    #[test]
    fn broken_json_text_is_one_problem_at_the_root(
        sample in any::<Index>(),
        edits in prop::collection::vec((any::<Index>(), prop_oneof![Just(None), any::<char>().prop_map(Some)]), 1..4),
    ) {
        let mut text: Vec<char> = serde_json::to_string_pretty(sample.get(&SAMPLES)).unwrap().chars().collect();
        for (at, edit) in &edits {
            let i = at.index(text.len());
            match edit {
                None => { text.remove(i); }
                Some(c) => text.insert(i, *c),
            }
        }
        let text: String = text.into_iter().collect();
        let result = parse(&text);
        prop_assert_eq!(&result, &parse(&text));
        match serde_json::from_str::<Value>(&text) {
            Ok(value) => {
                prop_assert_eq!(&result, &parse_value(value.clone()));
                if let Err(p) = &result {
                    check_problems(&value, p)?;
                }
            }
            Err(_) => {
                let p = result.expect_err("text that is not JSON is refused");
                prop_assert_eq!(p.0.len(), 1);
                let line = p.to_string();
                prop_assert!(line.starts_with("<root>: not valid JSON: "), "{}", line);
                prop_assert!(!line.contains('\n'), "{:?}", line);
            }
        }
    }

    #[test]
    fn a_mutated_valid_config_is_valid_or_names_each_problem_by_its_path(
        sample in any::<Index>(),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let mut config = sample.get(&SAMPLES).clone();
        let mut unknown = Vec::new();
        for m in &mutations {
            unknown.extend(apply(&mut config, m));
        }
        let problems = parse_both_ways(&config)?.unwrap_or_default();
        // A required field left out or emptied is named (or a place above it is).
        for path in REQUIRED {
            let parts: Vec<&str> = path.split('.').collect();
            let missing = match get(&config, &parts) {
                None => true,
                Some(Value::String(s)) => s.trim().is_empty(),
                Some(_) => true,
            };
            if missing {
                prop_assert!(
                    reported_at_or_above(&problems, path),
                    "{} is missing, not reported:\n{}", path, problems
                );
            }
        }
        // An unknown key in one of the schema's objects is named, unless the object itself
        // (or a place above it) was refused.
        for (parent, key) in unknown {
            let mut at = parent.clone();
            at.push(Seg::Key(key));
            let path = written(&at);
            let still_there = get_mut(&mut config, &at).is_some();
            let parent_refused = !parent.is_empty() && reported_at_or_above(&problems, &written(&parent));
            if still_there && !parent_refused {
                prop_assert!(
                    problems.iter().any(|p| p.path == path && p.message == "unknown field"),
                    "unknown field {:?} not reported:\n{}", path, problems
                );
            }
        }
    }
}
