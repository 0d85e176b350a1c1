//! Validation of the agent config: `RawConfig` in, a checked [`Config`] out, or
//! every problem found, each `<JSON path>: <message>`.

mod checked;
mod coredns_request;
pub mod general;
mod load;
mod local_dns;
mod problems;
mod zones;

#[cfg(test)]
pub(crate) mod tests;

use std::net::IpAddr;

pub use checked::*;
pub use load::{load_lenient, load_str, load_value};
pub use problems::{Problem, Problems};

use crate::config::{DownloadSource, RawConfig};
use crate::names::{DnsName, UnicastIpv4, UnitPath, Version};
use problems::{field, index};

/// Parses and validates config text in one step: unknown fields, wrong types
/// and every rule, all reported in one run.
pub fn parse(text: &str) -> Result<Config, Problems> {
    let value: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| Problems(vec![Problem::new("", format!("not valid JSON: {e}"))]))?;
    parse_value(value)
}

/// [`parse`] for a JSON value (e.g. one the harness built).
pub fn parse_value(value: serde_json::Value) -> Result<Config, Problems> {
    let (raw, mut problems) = load_lenient(value);
    let Some(raw) = raw else { return Err(problems) };
    match validate(&raw) {
        Ok(config) => problems.into_result(config),
        Err(more) => {
            // A value already reported as wrongly typed was left out; do not
            // report it again as missing.
            let reported: Vec<String> = problems.iter().map(|p| p.path.clone()).collect();
            for p in more.0 {
                if !reported
                    .iter()
                    .any(|r| p.path == *r || p.path.starts_with(&format!("{r}.")))
                {
                    problems.0.push(p);
                }
            }
            Err(problems)
        }
    }
}

/// Checks every rule of the config and returns the checked config, or every problem.
pub fn validate(raw: &RawConfig) -> Result<Config, Problems> {
    let mut p = Problems::default();

    let node_name =
        required(raw.node_name.as_deref(), "NodeName", &mut p).and_then(|s| dns_name(s, "NodeName", &mut p));
    let machine_name = match raw.machine_name.as_deref() {
        Some(s) => dns_name(s, "MachineName", &mut p),
        None => node_name.clone(),
    };

    let cluster_raw = raw.cluster.clone().unwrap_or_default();
    let ca = required(
        cluster_raw.ca_cert_base64.as_deref(),
        "Cluster.CaCertBase64",
        &mut p,
    );
    if let Some(ca) = ca {
        check(general::ca_cert_base64(ca), "Cluster.CaCertBase64", &mut p);
    }
    let cluster_dns =
        required(cluster_raw.cluster_dns.as_deref(), "Cluster.ClusterDNS", &mut p).and_then(|s| {
            s.parse::<UnicastIpv4>()
                .map_err(|e| p.push("Cluster.ClusterDNS", e.to_string()))
                .ok()
        });
    let cluster_version = version(cluster_raw.version.as_deref(), "Cluster.Version", &mut p);

    let kubelet = kubelet(raw, &mut p);
    let downloads = raw.downloads.clone().unwrap_or_default();
    let downloads = Downloads {
        kubernetes: source(
            downloads.kubernetes.as_ref(),
            "Downloads.Kubernetes",
            &["kubelet", "kubectl"],
            &mut p,
        ),
        core_dns: source(
            downloads.core_dns.as_ref(),
            "Downloads.CoreDNS",
            &["coredns"],
            &mut p,
        ),
    };

    let machine_image = raw.machine_image.as_ref().and_then(|m| {
        let url = required(m.url.as_deref(), "MachineImage.URL", &mut p);
        let sha = required(m.sha256.as_deref(), "MachineImage.SHA256", &mut p);
        let allow_http = m.allow_http == Some(true);
        url.and_then(|u| {
            check(
                general::source_url(u, allow_http, "MachineImage.AllowHTTP"),
                "MachineImage.URL",
                &mut p,
            )
            .map(|()| u.to_owned())
        })
        .zip(sha.and_then(|s| check(general::sha256(s), "MachineImage.SHA256", &mut p)))
        .map(|(url, sha256)| Artifact { url, sha256 })
    });

    let mut container_images = Vec::new();
    for (i, c) in raw.container_images.iter().enumerate() {
        let at = index("ContainerImages", i);
        let reference = required(c.reference.as_deref(), &field(&at, "Ref"), &mut p)
            .and_then(|r| check(general::one_line(r), &field(&at, "Ref"), &mut p).map(|()| r.to_owned()));
        let url = c.url.as_deref().and_then(|u| {
            let allowed = general::source_url(u, c.allow_http == Some(true), &field(&at, "AllowHTTP"));
            check(allowed, &field(&at, "URL"), &mut p).map(|()| u.to_owned())
        });
        let sha256 = c
            .sha256
            .as_deref()
            .and_then(|s| check(general::sha256(s), &field(&at, "SHA256"), &mut p));
        if let Some(reference) = reference {
            container_images.push(ContainerImage {
                reference,
                url,
                sha256,
            });
        }
    }

    let offline_source = raw
        .offline_artifacts
        .as_ref()
        .and_then(|o| o.source.as_deref())
        .and_then(|s| {
            check(general::offline_source(s), "OfflineArtifacts.Source", &mut p).map(|()| s.to_owned())
        });

    let host_prefix = raw
        .host_prefix
        .as_deref()
        .unwrap_or(DEFAULT_HOST_PREFIX)
        .parse::<UnitPath>()
        .map_err(|e| p.push("HostPrefix", e.to_string()))
        .ok();

    let enabled = raw.local_dns.as_ref().and_then(|l| l.enabled).unwrap_or(false);
    let local_dns = match (&raw.local_dns, enabled) {
        (Some(l), true) => local_dns::check(l, cluster_dns, &mut p),
        _ => None,
    };

    if let Some(allowed) = raw.daemon.as_ref().and_then(|d| d.allowed_sources.as_ref()) {
        for (i, base) in allowed.iter().enumerate() {
            check(general::url(base), &format!("Daemon.AllowedSources[{i}]"), &mut p);
        }
    }
    let daemon = raw.daemon.as_ref().and_then(|d| {
        let token = required(d.token.as_deref(), "Daemon.Token", &mut p)?;
        let account = crate::machina::daemon_access::service_account_name(
            machine_name.as_ref().map_or("<MachineName>", |m| m.as_str()),
        );
        let wanted =
            crate::service_account_token::subject(crate::machina::daemon_access::NAMESPACE, &account);
        let claims = check(
            crate::service_account_token::claims(token).map_err(|e| format!("the token {e}")),
            "Daemon.Token",
            &mut p,
        )?;
        if claims.subject != wanted {
            p.push(
                "Daemon.Token",
                format!(
                    "is a token of {:?}; the daemon of this machine runs as {wanted:?}",
                    claims.subject
                ),
            );
            return None;
        }
        Some(Daemon {
            token: token.trim().to_owned(),
            claims,
        })
    });

    if !p.is_empty() {
        return Err(p);
    }
    let (Some(node_name), Some(machine_name), Some(ca), Some(cluster_dns), Some(kubelet), Some(host_prefix)) =
        (node_name, machine_name, ca, cluster_dns, kubelet, host_prefix)
    else {
        unreachable!("every missing value was reported as a problem");
    };
    Ok(Config {
        machine_name,
        node_name,
        cluster: Cluster {
            ca_cert_base64: ca.trim().to_owned(),
            cluster_dns,
            version: cluster_version,
        },
        kubelet,
        downloads,
        machine_image,
        container_images,
        offline_source,
        host_prefix,
        local_dns,
        daemon,
    })
}

fn required<'a>(v: Option<&'a str>, path: &str, p: &mut Problems) -> Option<&'a str> {
    match v {
        Some(s) if !s.trim().is_empty() => Some(s),
        Some(_) => {
            p.push(path, "must not be empty");
            None
        }
        None => {
            p.push(path, "is required");
            None
        }
    }
}

fn check<T>(r: Result<T, String>, path: &str, p: &mut Problems) -> Option<T> {
    r.map_err(|e| p.push(path, e)).ok()
}

fn dns_name(s: &str, path: &str, p: &mut Problems) -> Option<DnsName> {
    s.parse::<DnsName>().map_err(|e| p.push(path, e.to_string())).ok()
}

fn version(v: Option<&str>, path: &str, p: &mut Problems) -> Option<Version> {
    v.and_then(|s| s.parse::<Version>().map_err(|e| p.push(path, e.to_string())).ok())
}

/// `Downloads.<source>`; `binaries` are the names its `SHA256` may pin.
fn source(raw: Option<&DownloadSource>, path: &str, binaries: &[&str], p: &mut Problems) -> Source {
    let Some(raw) = raw else { return Source::default() };
    let allow_http = raw.allow_http == Some(true);
    let allow_field = field(path, "AllowHTTP");
    let url = raw.url.as_deref().and_then(|u| {
        // `{version}` and `{arch}` are placeholders, replaced before use.
        let probe = u.replace("{version}", "0.0.0").replace("{arch}", "amd64");
        let checked = match general::url(&probe) {
            Err(_) => Err(format!("{u:?} is not an http:// or https:// URL")),
            Ok(()) => general::source_url(u, allow_http, &allow_field),
        };
        check(checked, &field(path, "URL"), p).map(|()| u.to_owned())
    });
    let base_url = raw.base_url.as_deref().and_then(|u| {
        check(
            general::source_url(u, allow_http, &allow_field),
            &field(path, "BaseURL"),
            p,
        )
        .map(|()| u.trim_end_matches('/').to_owned())
    });
    let mut sha256 = std::collections::BTreeMap::new();
    for (name, digest) in raw.sha256.iter().flatten() {
        let at = format!("{}.{name}", field(path, "SHA256"));
        if !binaries.contains(&name.as_str()) {
            p.push(
                &at,
                format!(
                    "{name:?} is not a binary of this source (one of {})",
                    binaries.join(", ")
                ),
            );
        } else if let Some(hex) = check(general::sha256(digest), &at, p) {
            sha256.insert(name.clone(), hex);
        }
    }
    Source {
        url,
        base_url,
        version: version(raw.version.as_deref(), &field(path, "Version"), p),
        sha256,
        allow_http,
    }
}

fn kubelet(raw: &RawConfig, p: &mut Problems) -> Option<Kubelet> {
    let k = raw.kubelet.clone().unwrap_or_default();
    let api_server = required(k.api_server.as_deref(), "Kubelet.ApiServer", p).and_then(|s| {
        check(general::https_url(s), "Kubelet.ApiServer", p).map(|()| s.trim_end_matches('/').to_owned())
    });
    let token = k.auth.as_ref().and_then(|a| a.bootstrap_token.as_deref());
    let bootstrap_token = required(token, "Kubelet.Auth.BootstrapToken", p).and_then(|t| {
        check(general::bootstrap_token(t), "Kubelet.Auth.BootstrapToken", p).map(|()| t.to_owned())
    });
    for (key, value) in &k.labels {
        let at = format!("Kubelet.Labels.{key}");
        check(
            general::label_key(key).and_then(|()| general::label_value(value)),
            &at,
            p,
        );
    }
    for (i, t) in k.register_with_taints.iter().enumerate() {
        check(general::taint(t), &index("Kubelet.RegisterWithTaints", i), p);
    }
    let mut node_ips = Vec::new();
    if let Some(list) = k.node_ip.as_deref() {
        for part in list.split(',') {
            match part.trim().parse::<IpAddr>() {
                Ok(ip) if ip.is_unspecified() || ip.is_multicast() || ip.is_loopback() => p.push(
                    "Kubelet.NodeIP",
                    format!("{ip} is not a unicast, non-loopback address"),
                ),
                Ok(ip) => node_ips.push(ip),
                Err(_) => p.push(
                    "Kubelet.NodeIP",
                    format!("{part:?} is not an IP address (comma-separated list)"),
                ),
            }
        }
    }
    if let Some(cidr) = k.configuration.get("podCIDR") {
        let checked = cidr
            .as_str()
            .ok_or_else(|| format!("{cidr} is not a string"))
            .and_then(crate::names::check_ipv4_cidr);
        check(checked, "Kubelet.Configuration.podCIDR", p);
    }
    for (key, want) in [
        ("apiVersion", "kubelet.config.k8s.io/v1beta1"),
        ("kind", "KubeletConfiguration"),
    ] {
        if let Some(v) = k.configuration.get(key)
            && v.as_str() != Some(want)
        {
            p.push(
                format!("Kubelet.Configuration.{key}"),
                format!("must be {want:?} (or left out)"),
            );
        }
    }
    Some(Kubelet {
        api_server: api_server?,
        bootstrap_token: bootstrap_token?,
        labels: k.labels,
        register_with_taints: k.register_with_taints,
        node_ips,
        configuration: k.configuration,
    })
}
