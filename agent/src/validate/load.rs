//! Parsing the config JSON into a `RawConfig`, reporting every unknown field
//! and every value of the wrong type (not only the first), each with its path.

use serde_json::Value;

use super::problems::{Problem, Problems, field, index};
use crate::config::RawConfig;

/// Parses config text. JSON syntax errors, unknown fields and wrongly typed
/// values are all reported, one problem each.
pub fn load_str(text: &str) -> Result<RawConfig, Problems> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| Problems(vec![Problem::new("", format!("not valid JSON: {e}"))]))?;
    load_value(value)
}

/// Turns a JSON value into a `RawConfig` (see [`load_str`]).
pub fn load_value(value: Value) -> Result<RawConfig, Problems> {
    match load_lenient(value) {
        (Some(raw), problems) if problems.is_empty() => Ok(raw),
        (_, problems) => Err(problems),
    }
}

/// Like [`load_value`], but also returns the config with every unknown field
/// and wrongly typed value left out, so that its other rules can be checked
/// in the same run. `None` only when the root itself is not an object.
pub fn load_lenient(mut value: Value) -> (Option<RawConfig>, Problems) {
    let mut problems = Problems::default();
    if !value.is_object() {
        problems.push("", "the config must be a JSON object");
        return (None, problems);
    }
    // Each pass reports the first wrongly typed value and removes it, so the
    // next pass can find the following one; a bound keeps this finite.
    for _ in 0..1000 {
        let mut unknown = Vec::new();
        let result: Result<RawConfig, _> = {
            let mut note = |p: serde_ignored::Path<'_>| unknown.push(ignored_path(&p));
            let de = serde_ignored::Deserializer::new(&value, &mut note);
            serde_path_to_error::deserialize(de)
        };
        match result {
            Ok(raw) => {
                // serde reads a struct from a JSON array too (its fields in order): a section
                // given as a list is an error, not a config.
                let output = serde_json::to_value(&raw).unwrap_or_default();
                let mut lists = Vec::new();
                lists_read_as_objects(&value, &output, &mut Vec::new(), &mut lists);
                if !lists.is_empty() {
                    for segments in lists.iter().rev() {
                        problems.push(render(segments), "expected a JSON object, found a list");
                        remove(&mut value, segments);
                    }
                    continue;
                }
                for path in unknown {
                    problems.push(path, "unknown field");
                }
                return (Some(raw), problems);
            }
            Err(e) => {
                let segments: Vec<Seg> = e.path().iter().filter_map(Seg::from_error_segment).collect();
                problems.push(render(&segments), e.inner().to_string());
                if !remove(&mut value, &segments) {
                    for path in unknown {
                        problems.push(path, "unknown field");
                    }
                    return (None, problems);
                }
            }
        }
    }
    (None, problems)
}

#[derive(Clone)]
enum Seg {
    Key(String),
    Index(usize),
}

impl Seg {
    fn from_error_segment(s: &serde_path_to_error::Segment) -> Option<Seg> {
        match s {
            serde_path_to_error::Segment::Seq { index } => Some(Seg::Index(*index)),
            serde_path_to_error::Segment::Map { key } => Some(Seg::Key(key.clone())),
            _ => None,
        }
    }
}

/// The places where the input holds a list and the parsed config (serialized back) an object.
fn lists_read_as_objects(input: &Value, output: &Value, at: &mut Vec<Seg>, found: &mut Vec<Vec<Seg>>) {
    match (input, output) {
        (Value::Array(_), Value::Object(_)) => found.push(at.clone()),
        (Value::Object(i), Value::Object(o)) => {
            for (key, value) in i {
                if let Some(out) = o.get(key) {
                    at.push(Seg::Key(key.clone()));
                    lists_read_as_objects(value, out, at, found);
                    at.pop();
                }
            }
        }
        (Value::Array(i), Value::Array(o)) => {
            for (n, (value, out)) in i.iter().zip(o).enumerate() {
                at.push(Seg::Index(n));
                lists_read_as_objects(value, out, at, found);
                at.pop();
            }
        }
        _ => {}
    }
}

fn render(segments: &[Seg]) -> String {
    segments.iter().fold(String::new(), |acc, s| match s {
        Seg::Key(k) => field(&acc, k),
        Seg::Index(i) => index(&acc, *i),
    })
}

fn ignored_path(p: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match p {
        Path::Root => String::new(),
        Path::Seq { parent, index: i } => index(&ignored_path(parent), *i),
        Path::Map { parent, key } => field(&ignored_path(parent), key),
        Path::Some { parent } | Path::NewtypeStruct { parent } | Path::NewtypeVariant { parent } => {
            ignored_path(parent)
        }
    }
}

/// Removes the value at `path`. A bad list element also drops the elements
/// after it, so that later problems never carry shifted indices. Returns
/// false when nothing could be removed (the root itself is wrong).
fn remove(value: &mut Value, path: &[Seg]) -> bool {
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    let mut v = value;
    for seg in parents {
        v = match (seg, v) {
            (Seg::Key(k), Value::Object(m)) => match m.get_mut(k) {
                Some(next) => next,
                None => return false,
            },
            (Seg::Index(i), Value::Array(a)) => match a.get_mut(*i) {
                Some(next) => next,
                None => return false,
            },
            _ => return false,
        };
    }
    match (last, v) {
        (Seg::Key(k), Value::Object(m)) => m.remove(k).is_some(),
        (Seg::Index(i), Value::Array(a)) if *i < a.len() => {
            a.truncate(*i);
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_section_given_as_a_list_is_an_error_at_its_path_not_a_config() {
        assert_eq!(
            lines(r#"{"Kubelet": ["", null, {"": ""}]}"#),
            ["Kubelet: expected a JSON object, found a list"]
        );
        assert_eq!(
            lines(r#"{"Kubelet": {"Auth": ["abcdef.0123456789abcdef"]}}"#),
            ["Kubelet.Auth: expected a JSON object, found a list"]
        );
    }

    fn lines(text: &str) -> Vec<String> {
        load_str(text)
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn every_unknown_field_is_named_with_its_path() {
        let got = lines(
            r#"{"Bogus": 1, "LocalDNS": {"Enabled": true, "NodeListenerIp": "x"},
                "ContainerImages": [{"Ref": "a"}, {"Reff": "b"}]}"#,
        );
        assert_eq!(
            got,
            // serde_json keeps object keys sorted, so problems come in that order.
            [
                "Bogus: unknown field",
                "ContainerImages[1].Reff: unknown field",
                "LocalDNS.NodeListenerIp: unknown field"
            ]
        );
    }

    #[test]
    fn every_wrongly_typed_value_is_reported_in_one_run() {
        let got = lines(r#"{"NodeName": 3, "LocalDNS": {"Enabled": "yes", "MemoryLimitInMB": 1.5}, "X": 1}"#);
        assert_eq!(got.len(), 4, "{got:#?}");
        assert!(
            got[0].starts_with("LocalDNS.Enabled: invalid type: string \"yes\""),
            "{got:#?}"
        );
        assert!(
            got[1].starts_with("LocalDNS.MemoryLimitInMB: invalid type: floating point"),
            "{got:#?}"
        );
        assert!(
            got[2].starts_with("NodeName: invalid type: integer `3`"),
            "{got:#?}"
        );
        assert_eq!(got[3], "X: unknown field");
    }

    #[test]
    fn a_bad_list_element_is_reported_with_its_index() {
        let got = lines(r#"{"Kubelet": {"RegisterWithTaints": ["a:NoSchedule", 5]}}"#);
        assert_eq!(got.len(), 1);
        assert!(
            got[0].starts_with("Kubelet.RegisterWithTaints[1]: invalid type"),
            "{got:#?}"
        );
    }

    #[test]
    fn syntax_errors_and_non_objects_are_reported_at_the_root() {
        assert!(lines("{").join("\n").starts_with("<root>: not valid JSON"));
        assert_eq!(lines("[]"), ["<root>: the config must be a JSON object"]);
    }

    #[test]
    fn kubelet_configuration_accepts_any_keys() {
        let raw =
            load_str(r#"{"Kubelet": {"Configuration": {"maxPods": 50, "anything": {"x": 1}}}}"#).unwrap();
        assert_eq!(raw.kubelet.unwrap().configuration["maxPods"], 50);
    }
}
