//! How a desired config differs from the applied one (pure): `apply` changes LocalDNS in place
//! (`LocalDNS`, and the CoreDNS download it installs from) and the agent daemon (`Daemon`);
//! anything else shapes the machine, the
//! kubelet's registration or the artifacts in its rootfs, and needs a repave.

use serde_json::Value;

use super::plan::Change;

/// Config fields `apply` changes in place.
pub const IN_PLACE: [&str; 3] = ["LocalDNS", "Downloads.CoreDNS", "Daemon"];

/// A config in normal form: read into the agent's config type and written out again, so
/// formatting and how a value was spelled in the file do not count as a change; a value that is
/// not a loadable config stays as it is.
pub fn normal_form(config: &Value) -> Value {
    crate::validate::load_value(config.clone())
        .map(|raw| serde_json::to_value(raw).expect("a RawConfig always serialises"))
        .unwrap_or_else(|_| config.clone())
}

/// The dotted paths (top-level keys, `Downloads.<kind>` below `Downloads`) whose values differ.
fn differing(old: &Value, new: &Value) -> Vec<String> {
    let empty = serde_json::Map::new();
    let o = old.as_object().unwrap_or(&empty);
    let n = new.as_object().unwrap_or(&empty);
    let mut keys: Vec<&String> = o.keys().chain(n.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut out = Vec::new();
    for key in keys {
        let (a, b) = (o.get(key), n.get(key));
        if a == b {
            continue;
        }
        if key == "Downloads" {
            let null = Value::Null;
            for sub in differing(a.unwrap_or(&null), b.unwrap_or(&null)) {
                out.push(format!("Downloads.{sub}"));
            }
        } else {
            out.push(key.clone());
        }
    }
    out
}

/// Classifies the change from `old` (the applied config) to `new`.
pub fn classify(old: &Value, new: &Value) -> Change {
    let fields = differing(old, new);
    if fields.is_empty() {
        return Change::Same;
    }
    if fields.iter().all(|f| IN_PLACE.contains(&f.as_str())) {
        Change::InPlace { fields }
    } else {
        Change::NeedsRepave {
            fields: fields
                .into_iter()
                .filter(|f| !IN_PLACE.contains(&f.as_str()))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> Value {
        json!({
            "NodeName": "n1",
            "Cluster": {"Version": "v1.35.4"},
            "LocalDNS": {"Enabled": true},
            "Downloads": {"CoreDNS": {"Version": "1.15.0"}, "Kubernetes": {"Version": "v1.35.4"}}
        })
    }

    #[test]
    fn the_normal_form_ignores_spelling_but_not_values() {
        let mut written = crate::validate::tests::base();
        written["Cluster"]["Version"] = json!("v1.35.4");
        let mut spelled = written.clone();
        spelled["Kubelet"]["Labels"] = json!({});
        spelled["ContainerImages"] = json!([]);
        assert_eq!(
            classify(&normal_form(&written), &normal_form(&spelled)),
            Change::Same
        );
        spelled["Cluster"]["Version"] = json!("1.36.0");
        assert!(matches!(
            classify(&normal_form(&written), &normal_form(&spelled)),
            Change::NeedsRepave { .. }
        ));
        assert_eq!(normal_form(&json!("not a config")), json!("not a config"));
    }

    #[test]
    fn an_identical_config_is_the_same() {
        assert_eq!(classify(&base(), &base()), Change::Same);
    }

    #[test]
    fn localdns_and_its_download_change_in_place() {
        let mut new = base();
        new["LocalDNS"] = json!({"Enabled": false});
        new["Downloads"]["CoreDNS"] = json!({"Version": "1.15.1"});
        new["Daemon"] = json!({"Token": "t"});
        assert_eq!(
            classify(&base(), &new),
            Change::InPlace {
                fields: vec!["Daemon".into(), "Downloads.CoreDNS".into(), "LocalDNS".into()]
            }
        );
        let mut removed = base();
        removed.as_object_mut().unwrap().remove("LocalDNS");
        assert!(matches!(classify(&base(), &removed), Change::InPlace { .. }));
    }

    #[test]
    fn anything_else_needs_a_repave_and_is_named() {
        let mut new = base();
        new["LocalDNS"] = json!({"Enabled": false});
        new["Cluster"]["Version"] = json!("v1.36.0");
        new["Downloads"]["Kubernetes"] = json!({"Version": "v1.36.0"});
        new["MachineImage"] = json!({"URL": "x"});
        assert_eq!(
            classify(&base(), &new),
            Change::NeedsRepave {
                fields: vec![
                    "Cluster".into(),
                    "Downloads.Kubernetes".into(),
                    "MachineImage".into()
                ]
            }
        );
    }
}
