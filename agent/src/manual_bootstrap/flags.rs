//! The flag values of `manual-bootstrap`, checked with the agent config's own rules before
//! anything is read from the cluster.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::names::DnsName;
use crate::validate::general;

use super::cli::ManualBootstrapArgs;
use super::error::ManualBootstrapError;

/// What the flags change in the agent config (they win over the Machine).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    pub local_dns: bool,
    /// `Kubelet.NodeIP` as given (comma-separated addresses).
    pub node_ip: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<String>,
    pub offline_source: Option<String>,
}

fn bad(flag: &'static str, value: &str, reason: impl Into<String>) -> ManualBootstrapError {
    ManualBootstrapError::Flag {
        flag,
        value: value.to_owned(),
        reason: reason.into(),
    }
}

/// Strips the `"<value>": ` or `"<value>" ` prefix the agent's checks put before their reason
/// (the error names the value already).
fn reason(value: &str, message: String) -> String {
    let quoted = format!("{value:?}");
    message
        .strip_prefix(&quoted)
        .map(|rest| rest.trim_start_matches(':').trim_start().to_owned())
        .unwrap_or(message)
}

impl Overrides {
    /// Checks every flag value (and the machine name); the first bad one is the error.
    pub fn from_args(args: &ManualBootstrapArgs) -> Result<Overrides, ManualBootstrapError> {
        args.machine
            .parse::<DnsName>()
            .map_err(|e| bad("machine", &args.machine, e.to_string()))?;
        let node_ip = args.node_ip.as_deref().map(node_ip).transpose()?;
        let mut labels = BTreeMap::new();
        for text in &args.node_labels {
            let (key, value) = label(text)?;
            labels.insert(key, value);
        }
        let mut taints: Vec<String> = Vec::new();
        for text in &args.taints {
            general::taint(text).map_err(|e| bad("--register-with-taint", text, reason(text, e)))?;
            merge_taint(&mut taints, text);
        }
        let offline_source = args
            .offline_artifacts_source
            .as_deref()
            .map(|s| {
                general::offline_source(s)
                    .map(|()| s.to_owned())
                    .map_err(|e| bad("--offline-artifacts-source", s, reason(s, e)))
            })
            .transpose()?;
        Ok(Overrides {
            local_dns: args.local_dns,
            node_ip,
            labels,
            taints,
            offline_source,
        })
    }
}

/// `--node-ip`: unicast, non-loopback addresses, comma-separated (as `Kubelet.NodeIP`).
fn node_ip(text: &str) -> Result<String, ManualBootstrapError> {
    let mut parts = Vec::new();
    for part in text.split(',').map(str::trim) {
        let ip = part
            .parse::<IpAddr>()
            .map_err(|_| bad("--node-ip", text, format!("{part:?} is not an IP address")))?;
        if ip.is_unspecified() || ip.is_multicast() || ip.is_loopback() {
            return Err(bad(
                "--node-ip",
                text,
                format!("{ip} is not a unicast, non-loopback address"),
            ));
        }
        parts.push(ip.to_string());
    }
    Ok(parts.join(","))
}

/// `--node-label key=value`.
fn label(text: &str) -> Result<(String, String), ManualBootstrapError> {
    let Some((key, value)) = text.split_once('=') else {
        return Err(bad("--node-label", text, "expected key=value"));
    };
    general::label_key(key)
        .and_then(|()| general::label_value(value))
        .map_err(|e| bad("--node-label", text, e))?;
    Ok((key.to_owned(), value.to_owned()))
}

/// A taint's identity: its key and effect (`key[=value]:Effect`).
fn taint_identity(taint: &str) -> (&str, &str) {
    let (kv, effect) = taint.rsplit_once(':').unwrap_or((taint, ""));
    (kv.split_once('=').map_or(kv, |(k, _)| k), effect)
}

/// Adds `taint` to `taints`, replacing one with the same key and effect.
pub fn merge_taint(taints: &mut Vec<String>, taint: &str) {
    let id = taint_identity(taint);
    taints.retain(|t| taint_identity(t) != id);
    taints.push(taint.to_owned());
}

/// The `--base-config` file: a JSON object (its values are checked with the assembled config).
pub fn base_config(path: &std::path::Path) -> Result<serde_json::Value, ManualBootstrapError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad("--base-config", &shown, format!("cannot be read: {e}")))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad("--base-config", &shown, format!("is not JSON: {e}")))?;
    if !value.is_object() {
        return Err(bad(
            "--base-config",
            &shown,
            "is not a JSON object (an agent config)",
        ));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    fn args(f: impl FnOnce(&mut ManualBootstrapArgs)) -> ManualBootstrapArgs {
        let mut a = ManualBootstrapArgs {
            machine: "m1".into(),
            ..Default::default()
        };
        f(&mut a);
        a
    }

    #[test]
    fn good_flags_become_overrides_the_last_label_per_key_winning() {
        let o = Overrides::from_args(&args(|a| {
            a.local_dns = true;
            a.node_ip = Some("10.0.0.5, fd00::5".into());
            a.node_labels = vec!["a=1".into(), "example.com/b=".into(), "a=2".into()];
            a.taints = vec![
                "k=v:NoSchedule".into(),
                "k=w:NoSchedule".into(),
                "k:NoExecute".into(),
            ];
            a.offline_artifacts_source = Some("file:///srv/bundle".into());
        }))
        .unwrap();
        assert_eq!(
            o,
            Overrides {
                local_dns: true,
                node_ip: Some("10.0.0.5,fd00::5".into()),
                labels: [("a".into(), "2".into()), ("example.com/b".into(), String::new())].into(),
                taints: vec!["k=w:NoSchedule".into(), "k:NoExecute".into()],
                offline_source: Some("file:///srv/bundle".into()),
            }
        );
    }

    #[rstest]
    #[case::ip_out_of_range(|a: &mut ManualBootstrapArgs| a.node_ip = Some("300.1.1.1".into()),
        r#"--node-ip "300.1.1.1": "300.1.1.1" is not an IP address"#)]
    #[case::loopback_ip(|a: &mut ManualBootstrapArgs| a.node_ip = Some("127.0.0.1".into()),
        r#"--node-ip "127.0.0.1": 127.0.0.1 is not a unicast, non-loopback address"#)]
    #[case::label_without_value(|a: &mut ManualBootstrapArgs| a.node_labels = vec!["novalue".into()],
        r#"--node-label "novalue": expected key=value"#)]
    #[case::bad_label_key(|a: &mut ManualBootstrapArgs| a.node_labels = vec!["-x=1".into()],
        r#"--node-label "-x=1": "-x" is not a label key ([prefix/]name, name 1-63 of [A-Za-z0-9._-])"#)]
    #[case::taint_without_effect(|a: &mut ManualBootstrapArgs| a.taints = vec!["dedicated=gpu".into()],
        r#"--register-with-taint "dedicated=gpu": is not a taint (key[=value]:Effect)"#)]
    #[case::taint_with_a_bad_effect(|a: &mut ManualBootstrapArgs| a.taints = vec!["k:Never".into()],
        r#"--register-with-taint "k:Never": effect "Never" is not NoSchedule, PreferNoSchedule or NoExecute"#)]
    #[case::remote_offline_source(|a: &mut ManualBootstrapArgs| a.offline_artifacts_source = Some("https://x/b".into()),
        r#"--offline-artifacts-source "https://x/b": is not a local directory: give an absolute path or a file:// URL (an offline bundle is read in place, never downloaded)"#)]
    #[case::machine_name(|a: &mut ManualBootstrapArgs| a.machine = "Bad_Name".into(), "machine \"Bad_Name\": ")]
    fn a_bad_value_is_one_line_naming_the_flag_and_the_value(
        #[case] set: fn(&mut ManualBootstrapArgs),
        #[case] want: &str,
    ) {
        let err = Overrides::from_args(&args(set)).unwrap_err().to_string();
        assert!(err.starts_with(want), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }

    #[test]
    fn merge_taint_replaces_only_the_same_key_and_effect() {
        let mut taints = vec![
            "a=1:NoSchedule".to_owned(),
            "a=1:NoExecute".to_owned(),
            "b:NoSchedule".to_owned(),
        ];
        merge_taint(&mut taints, "a=2:NoSchedule");
        assert_eq!(taints, ["a=1:NoExecute", "b:NoSchedule", "a=2:NoSchedule"]);
    }

    #[test]
    fn a_base_config_must_be_a_readable_json_object() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.json");
        let err = base_config(&missing).unwrap_err().to_string();
        assert!(
            err.starts_with("--base-config") && err.contains("cannot be read"),
            "{err}"
        );
        let list = dir.path().join("list.json");
        std::fs::write(&list, "[1]").unwrap();
        assert!(
            base_config(&list)
                .unwrap_err()
                .to_string()
                .contains("is not a JSON object")
        );
        let broken = dir.path().join("broken.json");
        std::fs::write(&broken, "{").unwrap();
        assert!(
            base_config(&broken)
                .unwrap_err()
                .to_string()
                .contains("is not JSON")
        );
        let ok = dir.path().join("ok.json");
        std::fs::write(&ok, r#"{"MachineImage": {}}"#).unwrap();
        assert!(base_config(&ok).unwrap().is_object());
    }
}
