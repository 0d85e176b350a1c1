//! Rendering from goal states built in code: custom template checks, disabled
//! LocalDNS, kubelet overrides, NOTRACK rule sets.

use serde_json::{Value, json};

use super::*;
use crate::goal::{HostFacts, OptionalFacts};
use crate::names::Slot;
use crate::validate::tests::{base, merge};

/// The goal of the base config with `patch` merged, for `slot`, on a host resolving through 10.0.0.2.
fn goal_in(slot: Slot, patch: Value) -> Goal {
    let mut v = base();
    merge(&mut v, &patch);
    let config = crate::validate::parse_value(v).unwrap();
    let facts = HostFacts {
        host_resolv_conf: "nameserver 10.0.0.2\n".into(),
        optional: OptionalFacts::default(),
    };
    crate::goal::resolve(&config, &facts, slot).unwrap()
}

fn goal(patch: Value) -> Goal {
    goal_in(Slot::Kube1, patch)
}

fn template(t: &str) -> Goal {
    goal(json!({"LocalDNS": {"CorefileTemplate": t}}))
}

fn text(r: &Rendered, path: &str) -> String {
    String::from_utf8(
        r.file(path)
            .unwrap_or_else(|| panic!("{path} not rendered"))
            .contents
            .clone(),
    )
    .unwrap()
}

/// What every custom template needs besides its own blocks: `ready` on both listeners and the
/// health zone (crate::corefile::check).
const READY_AND_HEALTH: &str = "{{ health_name }}:53 {\n bind {{ node_listener }} {{ cluster_listener }}\n whoami\n}\n\
     x.example:53 {\n bind {{ node_listener }} {{ cluster_listener }}\n ready {{ node_listener }}:{{ ready_port }}\n ready {{ cluster_listener }}:{{ ready_port }}\n}\n";

#[test]
fn a_custom_template_that_binds_and_exports_metrics_renders() {
    let g = template(&format!(
        ".:53 {{\n bind {{{{ node_listener }}}} {{{{ cluster_listener }}}}\n forward . {{{{ upstreams | join(' ') }}}}\n prometheus {{{{ metrics_address }}}}\n}}\n{READY_AND_HEALTH}"
    ));
    let r = render(&g).unwrap();
    let corefile = text(&r, "/var/lib/machines/kube1/etc/unbounded/localdns/Corefile");
    assert!(corefile.starts_with(HEADER));
    assert!(
        corefile
            .contains("bind 169.254.10.10 169.254.10.11\n forward . 10.0.0.2\n prometheus 127.0.0.1:9254\n"),
        "{corefile}"
    );
}

/// Validation checks a template with example values (upstream 192.0.2.53); rendering
/// checks it again with the node's own. A template that passes the first and not the second
/// is an error, not a file.
#[test]
fn a_custom_template_with_a_block_without_bind_on_this_node_is_an_error_not_a_file() {
    let g = template(&format!(
        ".:53 {{\n bind {{{{ node_listener }}}}\n prometheus {{{{ metrics_address }}}}\n}}\nexample.org:53 {{\n {{% if upstreams[0] == '192.0.2.53' %}}bind {{{{ node_listener }}}}{{% endif %}}\n whoami\n}}\n{READY_AND_HEALTH}"
    ));
    let e = render(&g).unwrap_err();
    assert!(
        matches!(e, RenderError::Corefile(CorefileError::NoBind { ref keys }) if keys == "example.org:53"),
        "{e}"
    );
}

/// CoreDNS's metrics address is the same wherever the template is checked, so validation already
/// refuses a template whose `prometheus` names another, naming the address wanted.
#[test]
fn a_custom_template_without_prometheus_on_coredns_metrics_address_is_refused_by_validation() {
    let mut v = base();
    merge(
        &mut v,
        &json!({"LocalDNS": {"CorefileTemplate": format!(
            ".:53 {{\n bind {{{{ node_listener }}}}\n prometheus 192.0.2.10:9253\n}}\n{READY_AND_HEALTH}"
        )}}),
    );
    let e = crate::validate::parse_value(v).unwrap_err();
    assert!(
        e.to_string()
            .contains("no server block has `prometheus 127.0.0.1:9254`"),
        "{e}"
    );
}

#[test]
fn disabled_localdns_renders_only_the_kubelet_configuration_with_cluster_dns() {
    let r = render(&goal(json!({"LocalDNS": {"Enabled": false}}))).unwrap();
    assert_eq!(r.files.len(), 1);
    assert!(r.links.is_empty());
    let yaml = text(&r, "/var/lib/machines/kube1/var/lib/kubelet/config.yaml");
    assert!(
        yaml.contains("clusterDNS:\n- 10.96.0.10\n") && !yaml.contains("resolvConf"),
        "{yaml}"
    );
}

#[test]
fn localdns_kubelet_keys_override_the_users() {
    let g = goal(
        json!({"Kubelet": {"Configuration": {"clusterDNS": ["1.1.1.1"], "resolvConf": "/x", "maxPods": 7}}}),
    );
    let yaml = text(
        &render(&g).unwrap(),
        "/var/lib/machines/kube1/var/lib/kubelet/config.yaml",
    );
    assert!(yaml.contains("clusterDNS:\n- 169.254.10.11\n"), "{yaml}");
    assert!(
        yaml.contains("resolvConf: /etc/unbounded/localdns/resolv.conf\n") && yaml.contains("maxPods: 7\n"),
        "{yaml}"
    );
    assert!(!yaml.contains("1.1.1.1"), "{yaml}");
}

#[test]
fn notrack_rules_are_eight_dns_requests_four_dns_replies_when_asked_and_four_probe_rules() {
    let with = goal(json!({}));
    let without = goal(json!({"LocalDNS": {"NOTRACKReplies": false}}));
    let rules = host::notrack_rules(with.local_dns.as_ref().unwrap());
    let dns = |rules: &[host::NotrackRule], reply: bool| {
        rules.iter().filter(|r| r.port == 53 && r.reply == reply).count()
    };
    assert_eq!(rules.len(), 16);
    assert_eq!((dns(&rules, false), dns(&rules, true)), (8, 4));
    assert!(rules.iter().filter(|r| r.reply).all(|r| r.chain == "output"));
    let probes: Vec<_> = rules.iter().filter(|r| r.port == 8181).collect();
    assert_eq!(probes.len(), 4);
    assert!(probes.iter().all(|r| r.chain == "output" && r.protocol == "tcp"));
    let rules_without = host::notrack_rules(without.local_dns.as_ref().unwrap());
    assert_eq!(rules_without.len(), 12);
    assert_eq!((dns(&rules_without, false), dns(&rules_without, true)), (8, 0));
    assert_eq!(
        rules[15].text(),
        "ip saddr 169.254.10.11 tcp sport 8181 notrack comment \"unbounded-localdns: skip conntrack\""
    );
    assert_eq!(
        rules[0].text(),
        "ip daddr 169.254.10.10 tcp dport 53 notrack comment \"unbounded-localdns: skip conntrack\""
    );
}

#[test]
fn every_file_with_comments_starts_with_the_header() {
    let r = render(&goal(json!({}))).unwrap();
    for f in &r.files {
        let text = String::from_utf8_lossy(&f.contents);
        if f.path.ends_with("node-upstreams") {
            assert_eq!(text, "10.0.0.2\n");
        } else if f.path.ends_with("localdns.nft") {
            assert!(
                text.starts_with(&format!("#!/usr/sbin/nft -f\n{HEADER}")),
                "{}",
                f.path.display()
            );
        } else {
            assert!(text.starts_with(HEADER), "{}", f.path.display());
        }
    }
}

#[test]
fn machine_paths_are_below_the_slot_rootfs() {
    let r = render(&goal_in(Slot::Kube2, json!({}))).unwrap();
    for f in r.in_place(Place::Machine) {
        assert_eq!(
            f.path,
            Path::new("/var/lib/machines/kube2").join(f.local_path.strip_prefix("/").unwrap())
        );
    }
    assert!(
        r.file("/etc/systemd/system/systemd-nspawn@kube2.service.d/10-localdns.conf")
            .is_some()
    );
}

#[test]
fn write_under_creates_parents_sets_modes_and_replaces_links() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let r = render(&goal(json!({}))).unwrap();
    write_under(dir.path(), &r).unwrap();
    write_under(dir.path(), &r).unwrap();
    let f = dir.path().join("etc/unbounded/localdns/localdns.nft");
    assert_eq!(std::fs::metadata(&f).unwrap().permissions().mode() & 0o777, 0o644);
    let link = dir
        .path()
        .join("var/lib/machines/kube1/etc/systemd/system/systemd-resolved.service");
    assert_eq!(std::fs::read_link(link).unwrap(), Path::new("/dev/null"));
}
