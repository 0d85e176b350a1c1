//! Property tests of the Corefile renderer (`agent::render::corefile`): rendering any valid
//! config never panics and gives the same bytes every time; the built-in Corefile binds every
//! server block and serves `prometheus` on the metrics address, never a wildcard or loopback one,
//! in both `.` blocks (docs/configuration.md, "The Corefile"); a custom template gives an error
//! naming what is wrong or a Corefile that binds every block and serves the metrics address.
//!
//! A failing case is kept in `prop_corefile.proptest-regressions` beside this file and replayed
//! first by every run (`cargo nextest run -p agent --test prop_corefile`); see `prop_support`.

mod prop_support;

use std::net::{IpAddr, Ipv4Addr};

use agent::corefile::{ServerBlock, server_blocks};
use agent::goal::{HostFacts, OptionalFacts};
use agent::names::{Slot, UnicastIpv4};
use agent::render::CorefileError;
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

/// The `prometheus` addresses of a Corefile's server blocks.
fn prometheus_addresses(blocks: &[ServerBlock]) -> Vec<String> {
    blocks
        .iter()
        .flat_map(|b| &b.directives)
        .filter(|d| d[0] == "prometheus")
        .filter_map(|d| d.get(1).cloned())
        .collect()
}

/// Whether a `prometheus` address listens on every address (`:9253`, `0.0.0.0:9253`, `[::]:9253`).
fn is_wildcard(address: &str) -> bool {
    let host = match address.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or_default(),
        None => address.rsplit_once(':').map_or(address, |(h, _)| h),
    };
    host.is_empty() || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_unspecified())
}

proptest! {
    #![proptest_config(prop_support::config())]

    #[test]
    fn builtin_corefile_binds_every_block_and_counts_both_listeners(i in input()) {
        let goal = goal(&i, None);
        prop_assume!(goal.is_some());
        let goal = goal.unwrap();
        let rendered = agent::render::render(&goal).expect("a valid goal always renders");
        // The same input gives the same bytes, resolved and rendered again.
        prop_assert_eq!(&goal, &self::goal(&i, None).unwrap());
        prop_assert_eq!(&rendered, &agent::render::render(&goal).unwrap());
        let l = goal.local_dns.as_ref().unwrap();
        let corefile = corefile_of(&rendered, i.slot);
        let blocks = server_blocks(&corefile).unwrap();
        prop_assert_eq!(blocks.len(), 3);
        for b in &blocks {
            prop_assert!(!b.binds().is_empty(), "block {:?} has no bind", b.keys);
        }
        let metrics = agent::corefile::COREDNS_METRICS_ADDRESS.to_string();
        let dots: Vec<_> = blocks.iter().filter(|b| b.keys == [".:53"]).collect();
        prop_assert_eq!(dots.len(), 2);
        prop_assert!(dots.iter().all(|b| b.has_prometheus_on(&metrics)), "{}", corefile);
        prop_assert_eq!(dots[0].binds(), vec![l.node_listener.addr()]);
        prop_assert_eq!(dots[1].binds(), vec![l.cluster_listener.addr()]);
        // CoreDNS's metrics only on its loopback address; the node's metrics address (the
        // supervisor's) is neither a wildcard nor loopback.
        prop_assert!(!l.metrics_address.socket_addr().ip().is_unspecified());
        prop_assert!(!l.metrics_address.socket_addr().ip().is_loopback());
        for address in prometheus_addresses(&blocks) {
            prop_assert_eq!(&address, &metrics);
        }
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
            let metrics = agent::corefile::COREDNS_METRICS_ADDRESS.to_string();
            prop_assert!(blocks.iter().any(|b| b.has_prometheus_on(&metrics)), "{}", corefile);
            for address in prometheus_addresses(&blocks) {
                prop_assert!(!is_wildcard(&address), "metrics on a wildcard address:\n{}", corefile);
            }
        }
    }

    #[test]
    fn a_metrics_address_is_refused_by_its_path_or_is_neither_wildcard_nor_loopback(
        i in input(),
        address in prop_oneof![
            (any::<u32>().prop_map(Ipv4Addr::from), any::<u16>()).prop_map(|(ip, port)| format!("{ip}:{port}")),
            prop::sample::select(vec![
                "0.0.0.0:9253", ":9253", "127.0.0.1:9253", "127.0.0.53:53", "[::]:9253", "10.0.0.1",
                "10.0.0.1:", "10.0.0.1:0", "10.0.0.1:65536", "255.255.255.255:9253", "224.0.0.1:9253",
                "localhost:9253", " 10.0.0.1:9253", "10.0.0.1:9253 ",
            ]).prop_map(str::to_owned),
        ],
    ) {
        prop_assume!(agent::validate::parse_value(config(&i, None)).is_ok());
        let mut config = config(&i, None);
        config["LocalDNS"]["MetricsAddress"] = json!(address);
        match agent::validate::parse_value(config) {
            Ok(c) => {
                let m = c.local_dns.unwrap().metrics_address.unwrap().socket_addr();
                prop_assert!(!m.ip().is_unspecified() && !m.ip().is_loopback() && m.port() != 0, "{}", m);
                prop_assert!(!is_wildcard(&m.to_string()));
            }
            Err(p) => {
                prop_assert!(
                    p.iter().any(|p| p.path == "LocalDNS.MetricsAddress"),
                    "{:?} refused without naming LocalDNS.MetricsAddress:\n{}", address, p
                );
            }
        }
    }

    /// Validation checks a template with example values and rendering with the node's: the
    /// template is refused by validation (naming `LocalDNS.CorefileTemplate`) or by rendering
    /// with one of its problems, or renders when it has none.
    #[test]
    fn a_custom_template_renders_exactly_when_it_has_none_of_the_checked_problems(
        i in input(),
        blocks in prop::collection::vec(template_block(), 1..6),
    ) {
        prop_assume!(goal(&i, None).is_some());
        let template: String = blocks.iter().map(TemplateBlock::text).collect();
        match agent::validate::parse_value(config(&i, Some(&template))) {
            Err(refused) => {
                let sample = Addresses { node: "169.254.10.10".into(), cluster: "169.254.10.11".into(), metrics: agent::corefile::COREDNS_METRICS_ADDRESS.into() };
                let allowed: Vec<String> = problems(&blocks, &sample).iter().map(ToString::to_string).collect();
                prop_assert!(!allowed.is_empty(), "refused although it has no problem:\n{}\n{}", refused, template);
                for p in refused.iter() {
                    prop_assert_eq!(&p.path, "LocalDNS.CorefileTemplate", "{}", refused);
                    prop_assert!(allowed.contains(&p.message), "{} is not one of {:?}:\n{}", p.message, allowed, template);
                }
            }
            Ok(_) => {
                let Some(goal) = goal(&i, Some(&template)) else { return Ok(()) };
                let ld = goal.local_dns.as_ref().unwrap();
                let real = Addresses {
                    node: ld.node_listener.to_string(),
                    cluster: ld.cluster_listener.to_string(),
                    metrics: agent::corefile::COREDNS_METRICS_ADDRESS.to_string(),
                };
                let allowed = problems(&blocks, &real);
                match agent::render::render(&goal) {
                    Ok(rendered) => {
                        prop_assert!(allowed.is_empty(), "rendered although {:?}:\n{}", allowed, template);
                        prop_assert_eq!(&rendered, &agent::render::render(&goal).unwrap());
                    }
                    Err(agent::render::RenderError::Corefile(e)) => {
                        prop_assert!(allowed.contains(&e), "{} is not one of the template's problems {:?}:\n{}", e, allowed, template);
                    }
                    Err(e) => prop_assert!(false, "{}", e),
                }
            }
        }
    }
}

/// The addresses a template is checked with.
struct Addresses {
    node: String,
    cluster: String,
    metrics: String,
}

/// One server block (or snippet) of a generated template.
#[derive(Debug, Clone)]
struct TemplateBlock {
    keys: &'static str,
    directives: Vec<&'static str>,
}

/// Server keys as written in the template, and how they render.
const KEYS: &[(&str, &str)] = &[
    (".:53", ".:53"),
    ("{{ health_name }}:53", "health-check.localdns.local:53"),
    ("lab.example:53", "lab.example:53"),
    ("lab.example", "lab.example"),
    (".:53 lab.example:53", ".:53 lab.example:53"),
    ("(snip)", "(snip)"),
];

/// Directives: binds with and without an address, `prometheus` on the metrics address,
/// on wildcards and on other addresses, and others that neither bind nor serve metrics.
const DIRECTIVES: &[&str] = &[
    "bind {{ node_listener }}",
    "bind {{ cluster_listener }} {{ node_listener }}",
    "bind",
    "bind 10.1.2.3",
    "prometheus {{ metrics_address }}",
    "prometheus {{ metrics_address }} {\n        # no options\n    }",
    "prometheus 0.0.0.0:9253",
    "prometheus :9153",
    "prometheus [::]:9253",
    "prometheus",
    "prometheus 10.1.2.3:9253",
    "forward . {{ upstreams | join(\" \") }}",
    "forward . {{ cluster_dns }} {\n        force_tcp\n        bind 10.9.9.9\n        prometheus 0.0.0.0:1\n    }",
    "{% for u in upstreams %}forward . {{ u }}\n    {% endfor %}",
    "errors",
    "whoami",
    "import snip",
    "# bind 10.0.0.1",
    "ready {{ node_listener }}:{{ ready_port }}",
    "ready {{ cluster_listener }}:{{ ready_port }}",
    "cache 30 { success 9984 }",
];

fn template_block() -> impl Strategy<Value = TemplateBlock> {
    (
        prop::sample::select(KEYS.iter().map(|k| k.0).collect::<Vec<_>>()),
        prop::collection::vec(prop::sample::select(DIRECTIVES), 0..5),
    )
        .prop_map(|(keys, directives)| TemplateBlock { keys, directives })
}

impl TemplateBlock {
    fn text(&self) -> String {
        let body: String = self.directives.iter().map(|d| format!("    {d}\n")).collect();
        format!("{} {{\n{body}}}\n", self.keys)
    }

    fn rendered_keys(&self) -> String {
        KEYS.iter().find(|k| k.0 == self.keys).unwrap().1.to_owned()
    }

    fn is_snippet(&self) -> bool {
        self.keys.starts_with('(')
    }

    /// The block's own `bind` directives with an address (not those nested in a plugin block).
    fn binds(&self) -> bool {
        self.directives
            .iter()
            .any(|d| d.starts_with("bind ") && !d.contains('#'))
    }

    /// The addresses its own `prometheus` directives name (`None`: no address).
    fn prometheus(&self, metrics: &str) -> Vec<Option<String>> {
        self.directives
            .iter()
            .filter(|d| d.starts_with("prometheus"))
            .map(|d| {
                let d = d.replace("{{ metrics_address }}", metrics);
                d.split_whitespace().nth(1).map(str::to_owned)
            })
            .collect()
    }
}

/// Every error a correct check may give for `blocks` checked with `at`: one per block without
/// `bind`, binding elsewhere or with metrics on a wildcard; an import of a missing snippet; the
/// missing `prometheus <metrics address>`, `ready` on a listener or health zone. None: it renders.
fn problems(blocks: &[TemplateBlock], at: &Addresses) -> Vec<CorefileError> {
    let metrics = at.metrics.as_str();
    let mut all = Vec::new();
    let servers: Vec<&TemplateBlock> = blocks.iter().filter(|b| !b.is_snippet()).collect();
    let has_snip = blocks.iter().any(|b| b.keys == "(snip)");
    for b in blocks {
        if b.directives.contains(&"bind 10.1.2.3") {
            all.push(CorefileError::BindElsewhere {
                keys: b.rendered_keys(),
                address: "10.1.2.3".into(),
                listeners: format!("{}, {}", at.node, at.cluster),
            });
        }
        if b.directives.contains(&"import snip") && !has_snip {
            all.push(CorefileError::ImportUnknown {
                target: "snip".into(),
            });
        }
    }
    for b in &servers {
        if !b.binds() {
            all.push(CorefileError::NoBind {
                keys: b.rendered_keys(),
            });
        }
        for address in b.prometheus(metrics).into_iter().flatten() {
            if is_wildcard(&address) {
                all.push(CorefileError::WildcardMetrics {
                    keys: b.rendered_keys(),
                    address,
                });
            }
        }
    }
    let served = servers
        .iter()
        .any(|b| b.prometheus(metrics).contains(&Some(metrics.to_owned())));
    if !served {
        all.push(CorefileError::NoPrometheus {
            address: metrics.to_owned(),
        });
    }
    for (listener, directive) in [
        (&at.node, "ready {{ node_listener }}:{{ ready_port }}"),
        (&at.cluster, "ready {{ cluster_listener }}:{{ ready_port }}"),
    ] {
        if !servers.iter().any(|b| b.directives.contains(&directive)) {
            all.push(CorefileError::NoReady {
                address: format!("{listener}:8181"),
            });
        }
    }
    let health = servers.iter().any(|b| {
        b.keys == "{{ health_name }}:53"
            && b.directives
                .contains(&"bind {{ cluster_listener }} {{ node_listener }}")
    });
    if !health {
        all.push(CorefileError::NoHealthZone {
            name: "health-check.localdns.local".into(),
        });
    }
    all
}
