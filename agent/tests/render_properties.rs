//! Property tests: rendering any valid config never panics, and the built-in
//! Corefile always binds every server block and serves `prometheus` on the
//! metrics address in both `.` blocks (docs/design.md §5); a custom template gives an
//! error or a Corefile that binds every block and serves the metrics address.

use std::net::Ipv4Addr;

use agent::goal::{HostFacts, OptionalFacts};
use agent::names::{Slot, UnicastIpv4};
use agent::render::corefile::server_blocks;
use proptest::prelude::*;
use serde_json::json;

const CA: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJmYWtlCi0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K";

fn unicast() -> impl Strategy<Value = Ipv4Addr> {
    any::<u32>()
        .prop_map(Ipv4Addr::from)
        .prop_filter("unicast", |ip| UnicastIpv4::try_from(*ip).is_ok())
}

#[derive(Debug, Clone)]
struct Input {
    node: Ipv4Addr,
    cluster: Ipv4Addr,
    cluster_dns: Ipv4Addr,
    nameservers: Vec<Ipv4Addr>,
    node_ip: Ipv4Addr,
    metrics: Option<(Ipv4Addr, u16)>,
    cpu: i64,
    memory: i64,
    plugins: Vec<&'static str>,
    notrack_replies: bool,
    slot: Slot,
    indent: &'static str,
}

fn input() -> impl Strategy<Value = Input> {
    (
        (
            unicast(),
            unicast(),
            unicast(),
            prop::collection::vec(unicast(), 1..5),
            unicast(),
        ),
        prop::option::of((unicast(), 1u16..)),
        (1i64..=10_000_000, 1i64..=1_000_000),
        prop::sample::subsequence(vec!["rewrite", "hosts", "cache", "log", "k8s_external"], 0..=5),
        any::<bool>(),
        prop::sample::select(vec![Slot::Kube1, Slot::Kube2]),
        prop::sample::select(vec!["", " ", "\t", " \t "]),
    )
        .prop_map(
            |(
                (node, cluster, cluster_dns, nameservers, node_ip),
                metrics,
                (cpu, memory),
                plugins,
                notrack_replies,
                slot,
                indent,
            )| Input {
                node,
                cluster,
                cluster_dns,
                nameservers,
                node_ip,
                metrics,
                cpu,
                memory,
                plugins,
                notrack_replies,
                slot,
                indent,
            },
        )
}

fn config(i: &Input, template: Option<&str>) -> serde_json::Value {
    let mut local = json!({
        "Enabled": true,
        "NodeListenerIP": i.node.to_string(),
        "ClusterListenerIP": i.cluster.to_string(),
        "CPULimitInMilliCores": i.cpu,
        "MemoryLimitInMB": i.memory,
        "RequiredPlugins": i.plugins,
        "NOTRACKReplies": i.notrack_replies,
    });
    if let Some((ip, port)) = i.metrics {
        local["MetricsAddress"] = json!(format!("{ip}:{port}"));
    }
    if let Some(t) = template {
        local["CorefileTemplate"] = json!(t);
    }
    json!({
        "NodeName": "node1",
        "Cluster": {"CaCertBase64": CA, "ClusterDNS": i.cluster_dns.to_string()},
        "Kubelet": {"ApiServer": "https://10.0.0.1:6443", "Auth": {"BootstrapToken": "abcdef.0123456789abcdef"}, "NodeIP": i.node_ip.to_string()},
        "LocalDNS": local,
    })
}

fn resolv_conf(i: &Input) -> String {
    i.nameservers
        .iter()
        .map(|ip| {
            format!(
                "{}nameserver{}{ip}\n",
                i.indent,
                if i.indent.is_empty() { " " } else { i.indent }
            )
        })
        .collect()
}

/// Validates and resolves; `None` when the generated input is legitimately refused.
fn goal(i: &Input, template: Option<&str>) -> Option<agent::goal::Goal> {
    let config = agent::validate::parse_value(config(i, template)).ok()?;
    let facts = HostFacts {
        host_resolv_conf: resolv_conf(i),
        optional: OptionalFacts::default(),
    };
    agent::goal::resolve(&config, &facts, i.slot).ok()
}

/// The rendered Corefile's text.
fn corefile_of(rendered: &agent::render::Rendered, slot: Slot) -> String {
    let path = slot.rootfs().join("etc/unbounded/localdns/Corefile");
    let file = rendered
        .file(&path)
        .expect("a Corefile is rendered with LocalDNS enabled");
    String::from_utf8(file.contents.clone()).expect("the Corefile is UTF-8")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn builtin_corefile_binds_every_block_and_counts_both_listeners(i in input()) {
        let goal = goal(&i, None);
        prop_assume!(goal.is_some());
        let goal = goal.unwrap();
        let rendered = agent::render::render(&goal).expect("a valid goal always renders");
        let l = goal.local_dns.as_ref().unwrap();
        let corefile = corefile_of(&rendered, i.slot);
        let blocks = server_blocks(&corefile).unwrap();
        prop_assert_eq!(blocks.len(), 3);
        for b in &blocks {
            prop_assert!(!b.binds().is_empty(), "block {:?} has no bind", b.keys);
        }
        let metrics = l.metrics_address.to_string();
        let dots: Vec<_> = blocks.iter().filter(|b| b.keys == [".:53"]).collect();
        prop_assert_eq!(dots.len(), 2);
        prop_assert!(dots.iter().all(|b| b.has_prometheus_on(&metrics)), "{}", corefile);
        prop_assert_eq!(dots[0].binds(), vec![l.node_listener.addr()]);
        prop_assert_eq!(dots[1].binds(), vec![l.cluster_listener.addr()]);
        // Upstreams never include a listener.
        prop_assert!(!l.upstreams.contains(&l.node_listener.addr()) && !l.upstreams.contains(&l.cluster_listener.addr()));
    }

    #[test]
    fn any_template_text_is_an_error_or_a_checked_corefile_never_a_panic(
        i in input(),
        t in prop_oneof![
            ".{0,200}",
            prop::sample::select(vec![
                "{{ node_listener }}", "{{ upstreams | join(' ') }}", "{% for u in upstreams %}{{ u }}{% endfor %}",
                ".:53 {\n bind {{ node_listener }}\n prometheus {{ metrics_address }}\n}\n", "{{ nope }}", "{% if %}", "}",
            ]).prop_map(str::to_owned),
        ],
    ) {
        let Some(goal) = goal(&i, Some(&t)) else { return Ok(()) };
        // An error is fine (a bad template is refused); a Corefile must pass the checks.
        if let Ok(rendered) = agent::render::render(&goal) {
            let corefile = corefile_of(&rendered, i.slot);
            let blocks = server_blocks(&corefile).expect("a rendered Corefile parses");
            for b in &blocks {
                prop_assert!(
                    b.directives.iter().any(|d| d[0] == "bind" && d.len() > 1),
                    "block {:?} has no bind:\n{}", b.keys, corefile
                );
            }
            let metrics = goal.local_dns.as_ref().unwrap().metrics_address.to_string();
            prop_assert!(blocks.iter().any(|b| b.has_prometheus_on(&metrics)), "{}", corefile);
        }
    }
}
