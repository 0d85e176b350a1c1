//! What a Machine may change about where the node's binaries come from (pure). A download whose
//! address differs from the applied config's is taken only when its digest is pinned
//! (`Downloads.<source>.SHA256.<binary>`) and the address lies below a base the node's own config
//! allows: `Daemon.AllowedSources`, else the applied config's own base for that source. The list
//! lives in the node's config, which no Machine field reaches, so whoever edits a Machine cannot
//! widen it; a sidecar from the new address proves nothing about who put the binary there.
//! Nor can a Machine turn on plain http for a source (`AllowHTTP`). Sources taken from the node's
//! offline bundle are the node's own and are not limited here.

use crate::artifact::source::{self, ArtifactSpec, COREDNS, KUBECTL, KUBELET};
use crate::config::{DownloadSource, RawConfig};

fn download<'a>(config: &'a RawConfig, key: &str) -> Option<&'a DownloadSource> {
    let downloads = config.downloads.as_ref()?;
    match key {
        "Kubernetes" => downloads.kubernetes.as_ref(),
        _ => downloads.core_dns.as_ref(),
    }
}

/// The version a source falls back to: `Cluster.Version` for the Kubernetes binaries.
fn fallback(config: &RawConfig, key: &str) -> Option<String> {
    (key == "Kubernetes")
        .then(|| config.cluster.as_ref()?.version.clone())
        .flatten()
}

/// Where `spec` is fetched from under `config`, or why the config cannot say.
fn address(config: &RawConfig, key: &str, spec: &ArtifactSpec, arch: &str) -> Result<String, String> {
    source::resolve_online(
        spec,
        download(config, key),
        fallback(config, key).as_deref(),
        arch,
    )
    .map(|r| r.location.to_string())
    .map_err(|e| e.to_string())
}

/// The bases the applied config allows for `spec`: `Daemon.AllowedSources`, else its own base
/// (`BaseURL`; a `URL` up to its first placeholder's directory; the upstream default).
fn allowed_bases(applied: &RawConfig, key: &str, spec: &ArtifactSpec) -> Vec<String> {
    if let Some(list) = applied.daemon.as_ref().and_then(|d| d.allowed_sources.clone()) {
        return list;
    }
    let own = download(applied, key);
    let non_empty = |s: &Option<String>| {
        s.as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    if let Some(url) = own.and_then(|d| non_empty(&d.url)) {
        let head = &url[..url.find('{').unwrap_or(url.len())];
        return vec![head[..head.rfind('/').map_or(head.len(), |i| i + 1)].to_owned()];
    }
    vec![
        own.and_then(|d| non_empty(&d.base_url))
            .unwrap_or_else(|| spec.default_base_url.to_owned()),
    ]
}

/// `url` lies below `base` (whole path segments: `https://a.example` does not allow
/// `https://a.example.evil`).
fn below(url: &str, base: &str) -> bool {
    url.starts_with(&format!("{}/", base.trim_end_matches('/')))
}

/// Every download `wanted` moves away from `applied` that is not pinned or not below an allowed
/// base, as one message naming each field; `Ok` when there is none.
pub fn check(applied: &RawConfig, wanted: &RawConfig, arch: &str) -> Result<(), String> {
    let offline = |c: &RawConfig| {
        c.offline_artifacts
            .as_ref()
            .and_then(|o| o.source.as_deref())
            .is_some_and(|s| !s.trim().is_empty())
    };
    if offline(wanted) {
        return Ok(());
    }
    let mut problems = Vec::new();
    for (key, specs) in [
        ("Kubernetes", &[KUBELET, KUBECTL][..]),
        ("CoreDNS", &[COREDNS][..]),
    ] {
        let allows_http = |c: &RawConfig| download(c, key).and_then(|d| d.allow_http) == Some(true);
        if allows_http(wanted) && !allows_http(applied) {
            problems.push(format!(
                "Downloads.{key}.AllowHTTP: the Machine turns on plain http for this source \
                 (only the node's own config can)"
            ));
        }
        for spec in specs {
            let new = address(wanted, key, spec, arch);
            if !offline(applied) && address(applied, key, spec, arch) == new {
                continue;
            }
            let new = match new {
                Ok(new) => new,
                // Changed into something no download can come from: never taken.
                Err(reason) => {
                    problems.push(format!("Downloads.{key}: {reason}"));
                    continue;
                }
            };
            let name = spec.name;
            if download(wanted, key).and_then(|d| d.pinned(name)).is_none() {
                problems.push(format!(
                    "Downloads.{key}.SHA256.{name}: the Machine moves {name} to {new} without pinning its digest \
                     (the daemon installs a changed download only with its SHA-256 pinned)"
                ));
            }
            let allowed = allowed_bases(applied, key, spec);
            if !allowed.iter().any(|base| below(&new, base)) {
                problems.push(format!(
                    "Downloads.{key}: {new} ({name}) is not below a base this node's own config allows \
                     ({}; Daemon.AllowedSources in the node's config lists them)",
                    allowed.join(", ")
                ));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(value: serde_json::Value) -> RawConfig {
        serde_json::from_value(value).unwrap()
    }

    fn applied() -> RawConfig {
        config(json!({
            "Cluster": {"Version": "v1.35.4"},
            "Downloads": {
                "Kubernetes": {"BaseURL": "http://192.168.100.1:8080/kubernetes", "AllowHTTP": true},
                "CoreDNS": {"BaseURL": "http://192.168.100.1:8080/coredns", "Version": "1.15.0", "AllowHTTP": true}
            }
        }))
    }

    fn with(patch: serde_json::Value) -> RawConfig {
        let mut value = serde_json::to_value(applied()).unwrap();
        crate::config::merge_patch(&mut value, &patch);
        config(value)
    }

    const PIN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn unchanged_sources_need_no_pin() {
        assert_eq!(check(&applied(), &applied(), "amd64"), Ok(()));
        let labels = with(json!({"Kubelet": {"Labels": {"zone": "b"}}}));
        assert_eq!(check(&applied(), &labels, "amd64"), Ok(()));
    }

    /// The attack: a Machine pointing CoreDNS at another server (which would serve a matching
    /// sidecar) is refused, naming the missing pin and the base it is not below.
    #[test]
    fn another_server_is_refused_without_a_pin_and_outside_the_allowed_bases() {
        let wanted = with(json!({"Downloads": {"CoreDNS": {"BaseURL": "https://evil.example/coredns"}}}));
        let err = check(&applied(), &wanted, "amd64").unwrap_err();
        assert!(
            err.contains(
                "Downloads.CoreDNS.SHA256.coredns: the Machine moves coredns to https://evil.example/coredns/"
            ),
            "{err}"
        );
        assert!(
            err.contains(
                "is not below a base this node's own config allows (http://192.168.100.1:8080/coredns;"
            ),
            "{err}"
        );
        let pinned = with(
            json!({"Downloads": {"CoreDNS": {"BaseURL": "https://evil.example/coredns", "SHA256": {"coredns": PIN}}}}),
        );
        let err = check(&applied(), &pinned, "amd64").unwrap_err();
        assert!(!err.contains("SHA256") && err.contains("not below"), "{err}");
    }

    #[test]
    fn a_pinned_change_below_the_own_base_is_taken() {
        let wanted =
            with(json!({"Downloads": {"CoreDNS": {"Version": "1.15.1", "SHA256": {"coredns": PIN}}}}));
        assert_eq!(check(&applied(), &wanted, "amd64"), Ok(()));
        let unpinned = with(json!({"Downloads": {"CoreDNS": {"Version": "1.15.1"}}}));
        assert!(
            check(&applied(), &unpinned, "amd64")
                .unwrap_err()
                .contains("SHA256.coredns")
        );
    }

    /// A Kubernetes upgrade through the Machine moves kubelet and kubectl: both must be pinned.
    #[test]
    fn a_kubernetes_version_change_needs_both_binaries_pinned() {
        let wanted = with(
            json!({"Cluster": {"Version": "v1.35.5"}, "Downloads": {"Kubernetes": {"SHA256": {"kubelet": PIN}}}}),
        );
        let err = check(&applied(), &wanted, "amd64").unwrap_err();
        assert!(
            err.contains("SHA256.kubectl") && !err.contains("SHA256.kubelet"),
            "{err}"
        );
        let both = with(
            json!({"Cluster": {"Version": "v1.35.5"}, "Downloads": {"Kubernetes": {"SHA256": {"kubelet": PIN, "kubectl": PIN}}}}),
        );
        assert_eq!(check(&applied(), &both, "amd64"), Ok(()));
    }

    /// Plain http is the node's choice: a Machine turning `AllowHTTP` on is refused, even for a
    /// pinned download below an allowed base, and so is a move to http without it.
    #[test]
    fn a_machine_cannot_turn_on_plain_http() {
        let mut https = applied();
        https.downloads.as_mut().unwrap().core_dns = Some(DownloadSource {
            base_url: Some("https://mirror.example/coredns".into()),
            ..Default::default()
        });
        let wanted = |patch| {
            let mut value = serde_json::to_value(&https).unwrap();
            crate::config::merge_patch(&mut value, &patch);
            config(value)
        };
        let turned_on = wanted(
            json!({"Downloads": {"CoreDNS": {"AllowHTTP": true, "Version": "1.15.1", "SHA256": {"coredns": PIN}}}}),
        );
        assert_eq!(
            check(&https, &turned_on, "amd64").unwrap_err(),
            "Downloads.CoreDNS.AllowHTTP: the Machine turns on plain http for this source \
             (only the node's own config can)"
        );
        // Moved to http without it: the address itself is refused, never skipped.
        let moved = wanted(
            json!({"Downloads": {"CoreDNS": {"BaseURL": "http://mirror.example/coredns", "SHA256": {"coredns": PIN}}}}),
        );
        let err = check(&https, &moved, "amd64").unwrap_err();
        assert!(
            err.starts_with("Downloads.CoreDNS: ") && err.contains("is plain http"),
            "{err}"
        );
    }

    #[test]
    fn the_node_config_lists_the_bases_and_whole_segments_count() {
        let mut applied = applied();
        applied.daemon = Some(crate::config::DaemonConfig {
            allowed_sources: Some(vec!["https://mirror.example/k8s".into()]),
            ..Default::default()
        });
        let inside = with(
            json!({"Downloads": {"CoreDNS": {"BaseURL": "https://mirror.example/k8s/coredns", "SHA256": {"coredns": PIN}}}}),
        );
        assert_eq!(check(&applied, &inside, "amd64"), Ok(()));
        let lookalike = with(
            json!({"Downloads": {"CoreDNS": {"BaseURL": "https://mirror.example/k8s-evil", "SHA256": {"coredns": PIN}}}}),
        );
        assert!(
            check(&applied, &lookalike, "amd64")
                .unwrap_err()
                .contains("not below")
        );
    }

    #[test]
    fn a_url_with_placeholders_allows_the_directory_before_them() {
        let applied = config(
            json!({"Downloads": {"CoreDNS": {"URL": "http://h:8080/c/v{version}/coredns.tgz", "Version": "1.15.0"}}}),
        );
        assert_eq!(allowed_bases(&applied, "CoreDNS", &COREDNS), ["http://h:8080/c/"]);
        assert!(below("http://h:8080/c/v1.15.1/coredns.tgz", "http://h:8080/c/"));
    }
}
