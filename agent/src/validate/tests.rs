//! Table tests for every validation rule.

use rstest::rstest;
use serde_json::{Value, json};

use super::*;

/// A minimal valid config with LocalDNS enabled; tests patch it.
pub(crate) fn base() -> Value {
    json!({
        "NodeName": "node1",
        "Cluster": {
            "CaCertBase64": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUIKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=",
            "ClusterDNS": "10.96.0.10"
        },
        "Kubelet": {
            "ApiServer": "https://192.168.100.1:6443",
            "Auth": {"BootstrapToken": "abcdef.0123456789abcdef"},
            "NodeIP": "192.168.100.10"
        },
        "LocalDNS": {"Enabled": true}
    })
}

/// Applies a JSON merge patch (objects merge, `null` removes, anything else replaces).
pub(crate) use crate::config::merge_patch as merge;

fn problems(patch: Value) -> Vec<String> {
    let mut v = base();
    merge(&mut v, &patch);
    match parse_value(v) {
        Ok(_) => Vec::new(),
        Err(p) => p.iter().map(ToString::to_string).collect(),
    }
}

fn checked(patch: Value) -> Config {
    let mut v = base();
    merge(&mut v, &patch);
    validate(&load_value(v).unwrap()).unwrap()
}

#[test]
fn the_base_config_is_valid_and_takes_the_defaults() {
    let c = checked(json!({}));
    let l = c.local_dns.unwrap();
    assert_eq!(l.node_listener.to_string(), "169.254.10.10");
    assert_eq!(l.cluster_listener.to_string(), "169.254.10.11");
    assert_eq!(l.metrics_address, None);
    assert_eq!((l.cpu_limit_millicores, l.memory_limit_mb), (2000, 128));
    assert!(l.notrack_replies);
    let plugins: Vec<&str> = l.required_plugins.iter().map(|p| p.as_str()).collect();
    // The baseline as docs/design.md §2 writes it.
    let baseline: Vec<&str> = "bind cache errors forward loop prometheus ready whoami"
        .split(' ')
        .collect();
    assert_eq!(plugins, baseline);
    assert_eq!(c.machine_name.as_str(), "node1");
    assert_eq!(c.host_prefix.as_str(), "/usr/local");
}

#[rstest]
#[case::node_listener_not_ipv4(json!({"LocalDNS": {"NodeListenerIP": "fd00::1"}}), "LocalDNS.NodeListenerIP: \"fd00::1\" is not an IPv4 address")]
#[case::node_listener_unspecified(json!({"LocalDNS": {"NodeListenerIP": "0.0.0.0"}}), "LocalDNS.NodeListenerIP: 0.0.0.0 is the unspecified address")]
#[case::node_listener_multicast(json!({"LocalDNS": {"NodeListenerIP": "239.1.1.1"}}), "LocalDNS.NodeListenerIP: 239.1.1.1 is a multicast address")]
#[case::node_listener_loopback(json!({"LocalDNS": {"NodeListenerIP": "127.0.0.53"}}), "LocalDNS.NodeListenerIP: 127.0.0.53 is a loopback address")]
#[case::cluster_listener_loopback(json!({"LocalDNS": {"ClusterListenerIP": "127.0.0.1"}}), "LocalDNS.ClusterListenerIP: 127.0.0.1 is a loopback address")]
#[case::listeners_equal(json!({"LocalDNS": {"ClusterListenerIP": "169.254.10.10"}}), "LocalDNS.ClusterListenerIP: 169.254.10.10 must differ from LocalDNS.NodeListenerIP")]
#[case::cluster_dns_is_node_listener(json!({"Cluster": {"ClusterDNS": "169.254.10.10"}}), "Cluster.ClusterDNS: 169.254.10.10 must differ from LocalDNS.NodeListenerIP")]
#[case::cluster_dns_is_cluster_listener(json!({"Cluster": {"ClusterDNS": "169.254.10.11"}}), "Cluster.ClusterDNS: 169.254.10.11 must differ from LocalDNS.ClusterListenerIP")]
#[case::cluster_dns_not_ipv4(json!({"Cluster": {"ClusterDNS": "fd00::10"}}), "Cluster.ClusterDNS: \"fd00::10\" is not an IPv4 address")]
#[case::cluster_dns_missing(json!({"Cluster": {"ClusterDNS": null}}), "Cluster.ClusterDNS: is required")]
#[case::metrics_not_ipv4_port(json!({"LocalDNS": {"MetricsAddress": "10.0.0.1"}}), "LocalDNS.MetricsAddress: \"10.0.0.1\" is not IPv4:port")]
#[case::metrics_port_zero(json!({"LocalDNS": {"MetricsAddress": "10.0.0.1:0"}}), "LocalDNS.MetricsAddress: \"10.0.0.1:0\": port 0 is not a usable port (1-65535)")]
#[case::metrics_port_too_big(json!({"LocalDNS": {"MetricsAddress": "10.0.0.1:65536"}}), "LocalDNS.MetricsAddress: \"10.0.0.1:65536\": port \"65536\" is not a number in 1-65535")]
#[case::metrics_wildcard(json!({"LocalDNS": {"MetricsAddress": "0.0.0.0:9253"}}), "LocalDNS.MetricsAddress: \"0.0.0.0:9253\": 0.0.0.0 is the unspecified address")]
#[case::metrics_loopback(json!({"LocalDNS": {"MetricsAddress": "127.0.0.1:9253"}}), "LocalDNS.MetricsAddress: \"127.0.0.1:9253\": 127.0.0.1 is a loopback address")]
#[case::cpu_zero(json!({"LocalDNS": {"CPULimitInMilliCores": 0}}), "LocalDNS.CPULimitInMilliCores: 0 must be greater than 0")]
#[case::cpu_negative(json!({"LocalDNS": {"CPULimitInMilliCores": -5}}), "LocalDNS.CPULimitInMilliCores: -5 must be greater than 0")]
#[case::memory_zero(json!({"LocalDNS": {"MemoryLimitInMB": 0}}), "LocalDNS.MemoryLimitInMB: 0 must be greater than 0")]
#[case::plugin_bad_name(json!({"LocalDNS": {"RequiredPlugins": ["rewrite", "9lives"]}}), "LocalDNS.RequiredPlugins[1]: \"9lives\" is not a plugin name (^[a-z][a-z0-9_-]*$ after trimming and lowercasing)")]
#[case::plugin_duplicate_after_normalising(json!({"LocalDNS": {"RequiredPlugins": ["rewrite", " Rewrite "]}}), "LocalDNS.RequiredPlugins[1]: \"rewrite\" is listed more than once")]
#[case::template_too_big(json!({"LocalDNS": {"CorefileTemplate": "#".repeat(64 * 1024 + 1)}}), "LocalDNS.CorefileTemplate: is 65537 bytes; at most 65536 (64 KiB)")]
#[case::template_unknown_variable(json!({"LocalDNS": {"CorefileTemplate": ".:53 {\n bind {{ nodelistener }}\n}\n"}}), "LocalDNS.CorefileTemplate: Corefile template: undefined value: `nodelistener` is undefined (template line 2)")]
#[case::template_syntax(json!({"LocalDNS": {"CorefileTemplate": ".:53 {{% if %}\n"}}), "LocalDNS.CorefileTemplate: Corefile template: syntax error")]
#[case::unknown_localdns_field(json!({"LocalDNS": {"NOTRACKReply": true}}), "LocalDNS.NOTRACKReply: unknown field")]
#[case::wrong_type(json!({"LocalDNS": {"NOTRACKReplies": "yes"}}), "LocalDNS.NOTRACKReplies: invalid type: string \"yes\", expected a boolean")]
#[case::node_name_missing(json!({"NodeName": null}), "NodeName: is required")]
#[case::node_name_unsafe(json!({"NodeName": "node 1"}), "NodeName: \"node 1\" is not a DNS name")]
#[case::machine_name_unsafe(json!({"MachineName": "m\n1"}), "MachineName: \"m\\n1\" is not a DNS name")]
#[case::host_prefix_relative(json!({"HostPrefix": "usr/local"}), "HostPrefix: \"usr/local\" is not an absolute path")]
#[case::host_prefix_with_space(json!({"HostPrefix": "/opt/my agent"}), "HostPrefix: \"/opt/my agent\" contains ' '")]
#[case::api_server_http(json!({"Kubelet": {"ApiServer": "http://10.0.0.1:6443"}}), "Kubelet.ApiServer: \"http://10.0.0.1:6443\" must use https://")]
#[case::token_bad(json!({"Kubelet": {"Auth": {"BootstrapToken": "secret"}}}), "Kubelet.Auth.BootstrapToken: is not a bootstrap token")]
#[case::ca_not_base64(json!({"Cluster": {"CaCertBase64": "not base64!"}}), "Cluster.CaCertBase64: is not valid base64")]
#[case::ca_not_pem(json!({"Cluster": {"CaCertBase64": "aGVsbG8="}}), "Cluster.CaCertBase64: does not decode to a PEM certificate")]
#[case::node_ip_loopback(json!({"Kubelet": {"NodeIP": "127.0.0.1"}}), "Kubelet.NodeIP: 127.0.0.1 is not a unicast, non-loopback address")]
#[case::node_ip_garbage(json!({"Kubelet": {"NodeIP": "10.0.0.1,foo"}}), "Kubelet.NodeIP: \"foo\" is not an IP address (comma-separated list)")]
#[case::label_bad(json!({"Kubelet": {"Labels": {"a b": "c"}}}), "Kubelet.Labels.a b: \"a b\" is not a label key")]
#[case::taint_bad(json!({"Kubelet": {"RegisterWithTaints": ["k=v:Sometimes"]}}), "Kubelet.RegisterWithTaints[0]: \"k=v:Sometimes\": effect \"Sometimes\" is not NoSchedule")]
#[case::kubelet_kind(json!({"Kubelet": {"Configuration": {"kind": "Pod"}}}), "Kubelet.Configuration.kind: must be \"KubeletConfiguration\" (or left out)")]
#[case::coredns_version(json!({"Downloads": {"CoreDNS": {"Version": "latest"}}}), "Downloads.CoreDNS.Version: \"latest\" is not a version (X.Y.Z or vX.Y.Z)")]
#[case::coredns_url(json!({"Downloads": {"CoreDNS": {"URL": "ftp://x/coredns"}}}), "Downloads.CoreDNS.URL: \"ftp://x/coredns\" is not an http:// or https:// URL")]
#[case::machine_image_sha(json!({"MachineImage": {"URL": "http://x/rootfs.tar", "SHA256": "abc"}}), "MachineImage.SHA256: \"abc\" is not a SHA-256 digest (64 hex digits)")]
#[case::container_image_ref_missing(json!({"ContainerImages": [{"URL": "http://x/pause.tar"}]}), "ContainerImages[0].Ref: is required")]
#[case::cluster_listener_unspecified(json!({"LocalDNS": {"ClusterListenerIP": "0.0.0.0"}}), "LocalDNS.ClusterListenerIP: 0.0.0.0 is the unspecified address")]
#[case::cluster_listener_multicast(json!({"LocalDNS": {"ClusterListenerIP": "224.0.0.1"}}), "LocalDNS.ClusterListenerIP: 224.0.0.1 is a multicast address")]
#[case::cpu_too_large(json!({"LocalDNS": {"CPULimitInMilliCores": 5_000_000_000_i64}}), "LocalDNS.CPULimitInMilliCores: 5000000000 is too large")]
#[case::memory_negative(json!({"LocalDNS": {"MemoryLimitInMB": -1}}), "LocalDNS.MemoryLimitInMB: -1 must be greater than 0")]
#[case::template_blank(json!({"LocalDNS": {"CorefileTemplate": " \n"}}), "LocalDNS.CorefileTemplate: is empty; leave it out to use the built-in template")]
#[case::api_server_missing(json!({"Kubelet": {"ApiServer": null}}), "Kubelet.ApiServer: is required")]
#[case::token_missing(json!({"Kubelet": {"Auth": null}}), "Kubelet.Auth.BootstrapToken: is required")]
#[case::ca_missing(json!({"Cluster": {"CaCertBase64": null}}), "Cluster.CaCertBase64: is required")]
#[case::kubelet_api_version(json!({"Kubelet": {"Configuration": {"apiVersion": "v1"}}}), "Kubelet.Configuration.apiVersion: must be \"kubelet.config.k8s.io/v1beta1\" (or left out)")]
#[case::cluster_version(json!({"Cluster": {"Version": "1.35"}}), "Cluster.Version: \"1.35\" is not a version")]
#[case::coredns_base_url(json!({"Downloads": {"CoreDNS": {"BaseURL": "mirror/coredns"}}}), "Downloads.CoreDNS.BaseURL: \"mirror/coredns\" is not an http:// or https:// URL")]
#[case::kubernetes_version(json!({"Downloads": {"Kubernetes": {"Version": "v1"}}}), "Downloads.Kubernetes.Version: \"v1\" is not a version")]
#[case::machine_image_url_missing(json!({"MachineImage": {"SHA256": "0".repeat(64)}}), "MachineImage.URL: is required")]
#[case::container_image_sha(json!({"ContainerImages": [{"Ref": "pause:3.10", "SHA256": "xyz"}]}), "ContainerImages[0].SHA256: \"xyz\" is not a SHA-256 digest")]
#[case::container_image_ref_two_lines(json!({"ContainerImages": [{"Ref": "a\nb"}]}), "ContainerImages[0].Ref: \"a\\nb\" contains a newline")]
#[case::label_value_bad(json!({"Kubelet": {"Labels": {"a": "-b"}}}), "Kubelet.Labels.a: \"-b\" is not a label value")]
#[case::offline_relative(json!({"OfflineArtifacts": {"Source": "bundle"}}), "OfflineArtifacts.Source: \"bundle\" is not a local directory: give an absolute path or a file:// URL")]
#[case::offline_http(json!({"OfflineArtifacts": {"Source": "http://192.168.100.1:8080/bundle"}}), "OfflineArtifacts.Source: \"http://192.168.100.1:8080/bundle\" is not a local directory: give an absolute path or a file:// URL (an offline bundle is read in place, never downloaded)")]
#[case::offline_https(json!({"OfflineArtifacts": {"Source": "https://mirror/bundle"}}), "OfflineArtifacts.Source: \"https://mirror/bundle\" is not a local directory")]
#[case::offline_file_remote_host(json!({"OfflineArtifacts": {"Source": "file://mirror/bundle"}}), "OfflineArtifacts.Source: \"file://mirror/bundle\" is not a local directory")]
fn each_rule_reports_its_path_and_reason(#[case] patch: Value, #[case] want: &str) {
    let got = problems(patch);
    assert!(
        got.iter().any(|p| p.starts_with(want)),
        "want a line starting with {want:?}, got {got:#?}"
    );
}

#[test]
fn download_pins_name_the_sources_binaries_and_are_hex() {
    let pin = "ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef0123456789";
    let got = problems(json!({"Downloads": {
        "Kubernetes": {"SHA256": {"coredns": pin}},
        "CoreDNS": {"SHA256": {"coredns": "xyz"}}
    }, "Daemon": {"AllowedSources": ["ftp://mirror"]}}));
    for want in [
        "Downloads.Kubernetes.SHA256.coredns: \"coredns\" is not a binary of this source (one of kubelet, kubectl)",
        "Downloads.CoreDNS.SHA256.coredns: ",
        "Daemon.AllowedSources[0]: \"ftp://mirror\" is not an http:// or https:// URL",
    ] {
        assert!(
            got.iter().any(|p| p.starts_with(want)),
            "want {want:?}, got {got:#?}"
        );
    }
    let c = checked(json!({"Downloads": {"Kubernetes": {"SHA256": {"kubelet": pin, "kubectl": pin}}}}));
    assert_eq!(c.downloads.kubernetes.sha256["kubelet"], pin.to_ascii_lowercase());
    assert_eq!(
        c.downloads.kubernetes.download().pinned("kubectl"),
        Some(pin.to_ascii_lowercase().as_str())
    );
}

/// Plain http only where the source itself says so: each kind of source refuses an `http://`
/// address naming its own `AllowHTTP`, and takes it once the second patch sets that.
#[rstest]
#[case::coredns_base(
    json!({"Downloads": {"CoreDNS": {"BaseURL": "http://mirror/coredns"}}}),
    json!({"Downloads": {"CoreDNS": {"AllowHTTP": true}}}),
    "Downloads.CoreDNS.BaseURL",
    "Downloads.CoreDNS.AllowHTTP"
)]
#[case::kubernetes_url(
    json!({"Downloads": {"Kubernetes": {"URL": "http://mirror/{version}/{arch}/kubelet"}}}),
    json!({"Downloads": {"Kubernetes": {"AllowHTTP": true}}}),
    "Downloads.Kubernetes.URL",
    "Downloads.Kubernetes.AllowHTTP"
)]
#[case::machine_image(
    json!({"MachineImage": {"URL": "http://mirror/rootfs.tar.gz", "SHA256": "a".repeat(64)}}),
    json!({"MachineImage": {"AllowHTTP": true}}),
    "MachineImage.URL",
    "MachineImage.AllowHTTP"
)]
#[case::container_image(
    json!({"ContainerImages": [{"Ref": "pause:3.10", "URL": "http://mirror/pause.tar"}]}),
    json!({"ContainerImages": [{"Ref": "pause:3.10", "URL": "http://mirror/pause.tar", "AllowHTTP": true}]}),
    "ContainerImages[0].URL",
    "ContainerImages[0].AllowHTTP"
)]
fn plain_http_is_refused_unless_the_source_allows_it(
    #[case] patch: Value,
    #[case] allow: Value,
    #[case] url_field: &str,
    #[case] allow_field: &str,
) {
    let got = problems(patch.clone());
    let want = format!("{url_field}: ");
    let line = got
        .iter()
        .find(|p| p.starts_with(&want))
        .unwrap_or_else(|| panic!("want a line for {url_field}, got {got:#?}"));
    assert!(
        line.contains("is plain http, which this source does not allow: use https://, or set ")
            && line.ends_with(&format!("{allow_field} to true to fetch it without TLS")),
        "{line}"
    );
    let mut allowed = patch;
    merge(&mut allowed, &allow);
    assert_eq!(problems(allowed), Vec::<String>::new());
}

#[rstest]
#[case::absolute_path("/mnt/lab")]
#[case::file_url("file:///mnt/lab")]
#[case::file_url_localhost("file://localhost/mnt/lab")]
fn an_offline_source_is_a_local_directory_as_start_reads_it(#[case] source: &str) {
    let c = checked(json!({"OfflineArtifacts": {"Source": source}}));
    assert_eq!(c.offline_source.as_deref(), Some(source));
    // What validate accepts, start's reader takes (and what it refuses, validate refuses above).
    assert_eq!(
        crate::artifact::offline::bundle_dir(source).unwrap(),
        std::path::Path::new("/mnt/lab")
    );
}

#[test]
fn every_problem_is_reported_in_one_run() {
    let got = problems(json!({
        "Bogus": true,
        "Cluster": {"ClusterDNS": "169.254.10.11"},
        "LocalDNS": {"NodeListenerIP": "0.0.0.0", "MemoryLimitInMB": 0, "RequiredPlugins": ["a", "a"], "Extra": 1}
    }));
    assert_eq!(got.len(), 6, "{got:#?}");
    assert!(got.contains(&"Bogus: unknown field".to_owned()), "{got:#?}");
    assert!(
        got.contains(&"LocalDNS.Extra: unknown field".to_owned()),
        "{got:#?}"
    );

    let got = problems(json!({"NodeName": 7, "Kubelet": {"NodeIP": "::1"}}));
    assert_eq!(
        got.len(),
        2,
        "a wrongly typed value is not also reported as missing: {got:#?}"
    );
}

#[test]
fn disabled_localdns_is_not_validated() {
    let c =
        checked(json!({"LocalDNS": {"Enabled": false, "NodeListenerIP": "nonsense", "MemoryLimitInMB": -1}}));
    assert_eq!(c.local_dns, None);
    let c = checked(json!({"LocalDNS": null}));
    assert_eq!(c.local_dns, None);
}

#[test]
fn cluster_dns_may_equal_a_listener_address_when_localdns_is_disabled() {
    checked(json!({"Cluster": {"ClusterDNS": "169.254.10.10"}, "LocalDNS": {"Enabled": false}}));
}

#[test]
fn required_plugins_are_normalised_sorted_and_merged_with_the_baseline() {
    let c = checked(json!({"LocalDNS": {"RequiredPlugins": [" Rewrite", "cache", "hosts"]}}));
    let names: Vec<String> = c
        .local_dns
        .unwrap()
        .required_plugins
        .iter()
        .map(ToString::to_string)
        .collect();
    let want: Vec<&str> = "bind cache errors forward hosts loop prometheus ready rewrite whoami"
        .split(' ')
        .collect();
    assert_eq!(names, want);
}

#[test]
fn versions_and_urls_are_normalised() {
    let c = checked(
        json!({"Downloads": {"CoreDNS": {"Version": "v1.12.4", "BaseURL": "https://192.168.100.1:8443/coredns/"}}}),
    );
    assert_eq!(c.downloads.core_dns.version.unwrap().as_str(), "1.12.4");
    assert_eq!(
        c.downloads.core_dns.base_url.unwrap(),
        "https://192.168.100.1:8443/coredns"
    );
}

#[test]
fn the_example_in_the_configuration_docs_is_valid() {
    let doc = include_str!("../../../docs/configuration.md");
    let start = doc
        .find("```json\n")
        .map(|i| i + "```json\n".len())
        .expect("docs/configuration.md has a ```json example");
    let end = start
        + doc[start..]
            .find("```")
            .expect("the example's ``` fence is closed");
    if let Err(p) = parse(&doc[start..end]) {
        panic!("the example in docs/configuration.md is not a valid config:\n{p}");
    }
}

fn daemon_token(sub: &str) -> String {
    crate::service_account_token::tests::jwt(json!({"sub": sub, "iat": 100, "exp": 3700}))
}

#[test]
fn a_daemon_section_gives_its_token_and_claims() {
    let token = daemon_token("system:serviceaccount:unbounded-system:agent-node1");
    let c = checked(json!({"Daemon": {"Token": format!(" {token}\n")}}));
    let d = c.daemon.unwrap();
    assert_eq!(d.token, token);
    assert_eq!((d.claims.issued_at, d.claims.expires_at), (100, 3700));
    assert_eq!(checked(json!({})).daemon, None);
}

#[rstest]
#[case::empty(json!({"Token": ""}), "Daemon.Token: must not be empty")]
#[case::missing(json!({}), "Daemon.Token: is required")]
#[case::not_jwt(json!({"Token": "abcdef.0123456789abcdef"}), "Daemon.Token: the token is not a JWT")]
#[case::another_machine(json!({"Token": daemon_token("system:serviceaccount:unbounded-system:agent-m2")}), "Daemon.Token: is a token of \"system:serviceaccount:unbounded-system:agent-m2\"; the daemon of this machine runs as \"system:serviceaccount:unbounded-system:agent-node1\"")]
#[case::a_user(json!({"Token": daemon_token("kubernetes-admin")}), "Daemon.Token: the token belongs to \"kubernetes-admin\", not to a ServiceAccount")]
fn a_daemon_token_that_is_not_this_machines_is_refused(#[case] daemon: Value, #[case] wanted: &str) {
    let p = problems(json!({"Daemon": daemon}));
    assert!(p.iter().any(|l| l.starts_with(wanted)), "{p:?}");
}

#[test]
fn the_daemon_token_follows_the_machine_name() {
    let token = daemon_token("system:serviceaccount:unbounded-system:agent-m7");
    assert!(
        checked(json!({"MachineName": "m7", "Daemon": {"Token": token}}))
            .daemon
            .is_some()
    );
}

#[test]
fn a_custom_template_is_checked_with_the_configs_own_zones() {
    // Reads every zone's cache, as if each had one.
    let template = crate::corefile::BUILTIN_TEMPLATE.replace("{%- if zone.cache %}", "{%- if true %}");
    assert!(
        problems(json!({"LocalDNS": {"CorefileTemplate": template}})).is_empty(),
        "with the default zones (each caching) the template is fine"
    );
    let found = problems(json!({"LocalDNS": {
        "CorefileTemplate": template,
        "NodeListenerOverrides": {"example.com": {"CacheDurationInSeconds": 0}}
    }}));
    assert!(
        found
            .iter()
            .any(|p| p.starts_with("LocalDNS.CorefileTemplate: Corefile template: ")),
        "a zone without a cache should break the template: {found:?}"
    );
}
