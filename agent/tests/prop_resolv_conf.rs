//! Property tests of upstream discovery and the machine's resolv.conf (`agent::goal::upstreams`,
//! `agent::render::machine`): host resolv.conf files with any mix of blanks, tabs, comments,
//! CRLF line ends and look-alike lines give the upstreams the documented rules give
//! (docs/configuration.md, "Upstreams"), never a listener or a loopback address, and the
//! machine's resolv.conf has exactly one `nameserver` line: the node listener's, last.
//!
//! A failing case is kept in `prop_resolv_conf.proptest-regressions` beside this file and
//! replayed first by every run (`cargo nextest run -p agent --test prop_resolv_conf`); see
//! `prop_support`.

mod prop_support;

use std::net::Ipv4Addr;

use agent::goal::upstreams::RESOLVED_STUBS;
use agent::goal::{GoalError, HostFacts, OptionalFacts};
use agent::names::Slot;
use agent::paths::{LOCALDNS_RESOLV_CONF, MACHINE_RESOLV_CONF, NODE_UPSTREAMS};
use agent::render::{HEADER, Rendered};
use proptest::prelude::*;
use serde_json::json;

const CLUSTER_DNS: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 10);

/// An address written after `nameserver`.
#[derive(Debug, Clone, PartialEq)]
enum Addr {
    V4(Ipv4Addr),
    /// Not an IPv4 address the agent takes: IPv6, out of range, empty.
    Other(&'static str),
}

/// One line of a resolv.conf, as a model.
#[derive(Debug, Clone)]
enum Line {
    /// `nameserver <addr>` with blanks before and between, and maybe a comment or words after.
    Nameserver {
        indent: &'static str,
        sep: &'static str,
        addr: Addr,
        trailing: &'static str,
    },
    /// `#` or `;` (maybe indented), then anything, often a nameserver line.
    Comment {
        indent: &'static str,
        marker: char,
        text: String,
    },
    /// `search`, `domain` or `options` and its words: kept, normalised.
    Keep {
        indent: &'static str,
        keyword: &'static str,
        words: Vec<(String, &'static str)>,
    },
    /// Only blanks.
    Blank(&'static str),
    /// Looks like a nameserver line and is not one (kept as written, trimmed).
    LookAlike(&'static str),
}

const INDENTS: &[&str] = &["", "", " ", "  ", "\t", " \t ", "\u{b}", "\u{c}", "\u{a0}"];
const SEPS: &[&str] = &[" ", "\t", "  ", "\t\t", " \t "];
/// What follows an address: nothing, blanks, a comment (glued or not), other words.
const TRAILING: &[&str] = &[
    "",
    " ",
    "\t",
    " # lab",
    "\t; x",
    "#glued",
    ";glued",
    " 10.0.0.99",
    " extra words",
];
const LOOK_ALIKES: &[&str] = &[
    "nameserver",
    "nameserver ",
    "nameservers 10.0.0.77",
    "NAMESERVER 10.0.0.77",
    "Nameserver 10.0.0.77",
    "nameserver10.0.0.77",
    "xnameserver 10.0.0.77",
    "nameserver:10.0.0.77",
    "sortlist 10.0.0.0/255.0.0.0",
];
const WORDS: &[&str] = &[
    "lab.example",
    "corp",
    "ndots:2",
    "edns0",
    "trust-ad",
    "nameserver",
    "10.0.0.66",
    "#x",
    ";y",
];

fn ipv4() -> impl Strategy<Value = Ipv4Addr> {
    prop_oneof![
        4 => (any::<u8>(), any::<u8>(), 1u8..255).prop_map(|(b, c, d)| Ipv4Addr::new(10, b, c, d)),
        2 => (any::<u8>(), 1u8..255).prop_map(|(c, d)| Ipv4Addr::new(169, 254, c, d)),
        2 => prop::sample::select(vec![
            Ipv4Addr::new(169, 254, 10, 10),
            Ipv4Addr::new(169, 254, 10, 11),
            Ipv4Addr::new(192, 168, 100, 1),
        ]),
        1 => any::<u32>().prop_map(Ipv4Addr::from),
    ]
}

fn addr() -> impl Strategy<Value = Addr> {
    prop_oneof![
        6 => ipv4().prop_map(Addr::V4),
        3 => prop::sample::select(vec![
            Ipv4Addr::new(127, 0, 0, 53),
            Ipv4Addr::new(127, 0, 0, 54),
            Ipv4Addr::new(127, 0, 0, 1),
            Ipv4Addr::new(127, 1, 2, 3),
            Ipv4Addr::UNSPECIFIED,
            Ipv4Addr::new(224, 0, 0, 251),
            Ipv4Addr::new(239, 255, 255, 250),
            Ipv4Addr::BROADCAST,
        ]).prop_map(Addr::V4),
        1 => prop::sample::select(vec!["fd00::1", "::1", "10.0.0.256", "10.0.0", "010.0.0.1"]).prop_map(Addr::Other),
    ]
}

fn line() -> impl Strategy<Value = Line> {
    let pick = |list: &'static [&'static str]| prop::sample::select(list);
    prop_oneof![
        5 => (pick(INDENTS), pick(SEPS), addr(), pick(TRAILING))
            .prop_map(|(indent, sep, addr, trailing)| Line::Nameserver { indent, sep, addr, trailing }),
        2 => (pick(INDENTS), prop::sample::select(vec!['#', ';']), "(nameserver[ \t]+10\\.0\\.0\\.[0-9]{1,2})?[ -~\t]{0,12}")
            .prop_map(|(indent, marker, text)| Line::Comment { indent, marker, text }),
        2 => (
            pick(INDENTS),
            pick(&["search", "domain", "options"]),
            prop::collection::vec((pick(WORDS).prop_map(str::to_owned), pick(SEPS)), 1..4),
        )
            .prop_map(|(indent, keyword, words)| Line::Keep { indent, keyword, words }),
        1 => pick(&["", " ", "\t", " \t\u{b} "]).prop_map(Line::Blank),
        1 => pick(LOOK_ALIKES).prop_map(Line::LookAlike),
    ]
}

/// A file of lines, each ended by `\n` or `\r\n`, the last maybe not ended.
fn file() -> impl Strategy<Value = (Vec<Line>, Vec<bool>, bool)> {
    prop::collection::vec((line(), any::<bool>()), 0..10).prop_flat_map(|lines| {
        let (lines, crlf): (Vec<Line>, Vec<bool>) = lines.into_iter().unzip();
        (Just(lines), Just(crlf), any::<bool>())
    })
}

fn text((lines, crlf, last_ended): &(Vec<Line>, Vec<bool>, bool)) -> String {
    let mut out = String::new();
    for (i, (l, crlf)) in lines.iter().zip(crlf).enumerate() {
        match l {
            Line::Nameserver {
                indent,
                sep,
                addr,
                trailing,
            } => {
                let a = match addr {
                    Addr::V4(ip) => ip.to_string(),
                    Addr::Other(s) => (*s).to_owned(),
                };
                out.push_str(&format!("{indent}nameserver{sep}{a}{trailing}"));
            }
            Line::Comment { indent, marker, text } => out.push_str(&format!("{indent}{marker}{text}")),
            Line::Keep {
                indent,
                keyword,
                words,
            } => {
                out.push_str(indent);
                out.push_str(keyword);
                for (w, sep) in words {
                    out.push_str(sep);
                    out.push_str(w);
                }
            }
            Line::Blank(b) => out.push_str(b),
            Line::LookAlike(s) => out.push_str(s),
        }
        if i + 1 < lines.len() || *last_ended {
            out.push_str(if *crlf { "\r\n" } else { "\n" });
        }
    }
    out
}

/// The nameservers the documented rules take from a file, in file order: IPv4, neither
/// unspecified nor multicast, whatever the blanks, with a comment or words after it.
fn nameservers(lines: &[Line]) -> Vec<Ipv4Addr> {
    lines
        .iter()
        .filter_map(|l| match l {
            Line::Nameserver {
                addr: Addr::V4(ip), ..
            } if !ip.is_unspecified() && !ip.is_multicast() => Some(*ip),
            _ => None,
        })
        .collect()
}

/// The lines the machine's resolv.conf keeps of a host file: `search`/`domain`/`options` with
/// their words joined by one space, and the look-alikes trimmed.
fn kept(lines: &[Line]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|l| match l {
            Line::Keep { keyword, words, .. } => Some(
                std::iter::once(*keyword)
                    .chain(words.iter().map(|(w, _)| w.as_str()))
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            Line::LookAlike(s) => {
                let words: Vec<&str> = s.split_whitespace().collect();
                (words.first() != Some(&"nameserver")).then(|| words.join(" "))
            }
            _ => None,
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Upstreams(Vec<Ipv4Addr>),
    NoUpstream,
    UnsupportedStub,
    SplitDns,
    MissingFact(&'static str),
}

fn usable(mut ips: Vec<Ipv4Addr>, listeners: &[Ipv4Addr]) -> Outcome {
    ips.retain(|ip| !listeners.contains(ip));
    ips.sort();
    ips.dedup();
    if ips.is_empty() {
        Outcome::NoUpstream
    } else {
        Outcome::Upstreams(ips)
    }
}

/// The documented rules (docs/configuration.md, "Upstreams"), on the models.
fn expected(
    host: &[Line],
    resolved: Option<&[Line]>,
    domains: Option<&str>,
    listeners: &[Ipv4Addr],
) -> Outcome {
    let ns = nameservers(host);
    if !ns.iter().any(Ipv4Addr::is_loopback) {
        return usable(ns, listeners);
    }
    if ns.iter().any(|ip| !RESOLVED_STUBS.contains(ip)) {
        return Outcome::UnsupportedStub;
    }
    let Some(domains) = domains else {
        return Outcome::MissingFact("resolvectl_domain");
    };
    if domains
        .split_whitespace()
        .any(|d| d.starts_with('~') && d != "~.")
    {
        return Outcome::SplitDns;
    }
    let Some(resolved) = resolved else {
        return Outcome::MissingFact("resolved_resolv_conf");
    };
    usable(
        nameservers(resolved)
            .into_iter()
            .filter(|ip| !ip.is_loopback())
            .collect(),
        listeners,
    )
}

fn outcome(r: &Result<agent::goal::Goal, GoalError>) -> Outcome {
    match r {
        Ok(g) => Outcome::Upstreams(g.local_dns.as_ref().unwrap().upstreams.clone()),
        Err(GoalError::NoUpstream { .. }) => Outcome::NoUpstream,
        Err(GoalError::UnsupportedStub { .. }) => Outcome::UnsupportedStub,
        Err(GoalError::SplitDns { .. }) => Outcome::SplitDns,
        Err(GoalError::MissingFact { fact, .. }) => Outcome::MissingFact(fact),
        Err(e) => panic!("unexpected error: {e}"),
    }
}

fn listeners() -> impl Strategy<Value = (Ipv4Addr, Ipv4Addr)> {
    (ipv4(), ipv4()).prop_filter("distinct unicast listeners, not the cluster DNS", |(n, c)| {
        n != c
            && ![*n, *c]
                .iter()
                .any(|ip| *ip == CLUSTER_DNS || agent::names::UnicastIpv4::try_from(*ip).is_err())
    })
}

fn goal(node: Ipv4Addr, cluster: Ipv4Addr, facts: &HostFacts) -> Result<agent::goal::Goal, GoalError> {
    let config = json!({
        "NodeName": "node1",
        "Cluster": {
            "CaCertBase64": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJmYWtlCi0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K",
            "ClusterDNS": CLUSTER_DNS.to_string(),
        },
        "Kubelet": {
            "ApiServer": "https://192.168.100.1:6443",
            "Auth": {"BootstrapToken": "abcdef.0123456789abcdef"},
            "NodeIP": "192.168.100.10",
        },
        "LocalDNS": {
            "Enabled": true,
            "NodeListenerIP": node.to_string(),
            "ClusterListenerIP": cluster.to_string(),
        },
    });
    let config = agent::validate::parse_value(config).expect("the generated config is valid");
    agent::goal::resolve(&config, facts, Slot::Kube1)
}

fn machine_file(rendered: &Rendered, local: &str) -> String {
    let path = Slot::Kube1.rootfs().join(local.trim_start_matches('/'));
    let file = rendered
        .file(&path)
        .unwrap_or_else(|| panic!("{local} is rendered"));
    String::from_utf8(file.contents.clone()).unwrap()
}

/// Whether glibc or the agent would read `line` as a `nameserver` line.
fn reads_as_nameserver(line: &str) -> bool {
    let glibc = line
        .strip_prefix("nameserver")
        .is_some_and(|rest| rest.starts_with([' ', '\t']));
    glibc || line.split_whitespace().next() == Some("nameserver")
}

const DOMAINS: &[&str] = &[
    "",
    "Global:\n",
    "Global:\nLink 2 (ens2): ~.\n",
    "Global:\nLink 2 (ens2): ~. lab.example\n",
    "Global: ~corp.example\nLink 2 (ens2): ~.\n",
    "Link 3 (wg0): ~lab.example\n",
];

proptest! {
    #![proptest_config(prop_support::config())]

    #[test]
    fn upstreams_follow_the_documented_rules_and_the_machine_resolver_is_the_node_listener_alone(
        (node, cluster) in listeners(),
        host in file(),
        resolved in prop::option::weighted(0.9, file()),
        domains in prop::option::weighted(0.9, prop::sample::select(DOMAINS)),
        stub_first in prop::option::of(prop::sample::select(RESOLVED_STUBS.to_vec())),
    ) {
        // Often a systemd-resolved host: a stub line first.
        let mut host = host;
        if let Some(stub) = stub_first {
            host.0.insert(0, Line::Nameserver { indent: "", sep: " ", addr: Addr::V4(stub), trailing: "" });
            host.1.insert(0, false);
        }
        let facts = HostFacts {
            host_resolv_conf: text(&host),
            optional: OptionalFacts {
                resolved_resolv_conf: resolved.as_ref().map(text),
                resolvectl_domain: domains.map(str::to_owned),
                ..Default::default()
            },
        };
        let listeners = [node, cluster];
        let result = goal(node, cluster, &facts);
        let want = expected(&host.0, resolved.as_ref().map(|r| r.0.as_slice()), domains, &listeners);
        prop_assert_eq!(outcome(&result), want, "host resolv.conf:\n{}", facts.host_resolv_conf);
        let Ok(goal) = result else { return Ok(()) };

        let l = goal.local_dns.as_ref().unwrap();
        prop_assert!(!l.upstreams.is_empty());
        prop_assert!(l.upstreams.windows(2).all(|w| w[0] < w[1]), "sorted and distinct: {:?}", l.upstreams);
        for ip in &l.upstreams {
            prop_assert!(!listeners.contains(ip), "listener {} is an upstream", ip);
            prop_assert!(!ip.is_loopback() && !ip.is_unspecified() && !ip.is_multicast(), "upstream {}", ip);
        }

        let rendered = agent::render::render(&goal).expect("a resolved goal renders");
        let machine = machine_file(&rendered, MACHINE_RESOLV_CONF);
        prop_assert_eq!(&machine, &machine_file(&rendered, LOCALDNS_RESOLV_CONF));
        let body = machine.strip_prefix(HEADER).expect("the header comes first");
        prop_assert!(body.ends_with('\n') && !body.contains('\r'), "{:?}", body);
        let lines: Vec<&str> = body.lines().collect();
        let (last, rest) = lines.split_last().unwrap();
        prop_assert_eq!(*last, format!("nameserver {node}"));
        for line in rest {
            prop_assert!(!reads_as_nameserver(line), "stray nameserver line {:?} in\n{}", line, machine);
            prop_assert!(!line.trim().is_empty(), "blank line in\n{}", machine);
            prop_assert!(!line.starts_with(['#', ';']), "host comment {:?} copied into\n{}", line, machine);
            prop_assert_eq!(line.trim(), *line);
        }
        prop_assert_eq!(rest.to_vec(), kept(&host.0), "host resolv.conf:\n{}", facts.host_resolv_conf);

        let upstreams = machine_file(&rendered, NODE_UPSTREAMS);
        let listed: Vec<String> = l.upstreams.iter().map(ToString::to_string).collect();
        prop_assert_eq!(upstreams.lines().collect::<Vec<_>>(), listed);
    }

    #[test]
    fn any_text_as_host_resolv_conf_never_panics_nor_leaves_a_stray_nameserver(
        host in "(?s).{0,200}",
        resolved in "(?s).{0,100}",
    ) {
        let facts = HostFacts {
            host_resolv_conf: host.clone(),
            optional: OptionalFacts {
                resolved_resolv_conf: Some(resolved),
                resolvectl_domain: Some(String::new()),
                ..Default::default()
            },
        };
        let node = Ipv4Addr::new(169, 254, 10, 10);
        let Ok(goal) = goal(node, Ipv4Addr::new(169, 254, 10, 11), &facts) else { return Ok(()) };
        let rendered = agent::render::render(&goal).expect("a resolved goal renders");
        let machine = machine_file(&rendered, MACHINE_RESOLV_CONF);
        let lines: Vec<&str> = machine.lines().collect();
        let nameservers: Vec<&&str> = lines.iter().filter(|l| reads_as_nameserver(l)).collect();
        prop_assert_eq!(nameservers, vec![&"nameserver 169.254.10.10"], "{:?}", host);
        prop_assert_eq!(lines.last(), Some(&"nameserver 169.254.10.10"));
    }
}
