//! `reset`'s removal of what the node's processes leave in the shared host network namespace, on
//! this kernel's nftables and links in a fresh network namespace: the CNI bridge and the
//! `KUBE-*`/`CNI-*` chains go with the rules jumping to them, tables left empty go, kube-proxy's
//! nftables tables (`ip`/`ip6 kube-proxy`) go whole, an operator's tables, chains and rules stay
//! (an `inet kube-proxy` table is not kube-proxy's), and a second run finds nothing. Needs root.

mod hostnet_support;

use std::process::Command;

use agent::exec;
use agent::hostnet::ResetReport;
use agent::hostnet::node_leftovers;
use hostnet_support::fresh_netns;

/// What kubelet, kube-proxy and the CNI plugins leave (as iptables-nft writes it), beside an
/// operator's own table and an operator's chain in a table the node also used.
const NODE_AND_OPERATOR: &str = r#"
table ip filter {
    chain INPUT { type filter hook input priority 0; policy accept; jump KUBE-FIREWALL; }
    chain KUBE-FIREWALL { counter; }
    chain KUBE-KUBELET-CANARY { }
}
table ip nat {
    chain POSTROUTING { type nat hook postrouting priority 100; policy accept; jump CNI-HOSTPORT-MASQ; }
    chain CNI-HOSTPORT-MASQ { jump CNI-DN-1; }
    chain CNI-DN-1 { counter; }
}
table ip6 mangle {
    chain KUBE-KUBELET-CANARY { }
    chain OPERATOR { counter; }
}
table ip operator {
    chain input { type filter hook input priority 0; policy accept; tcp dport 22 accept; }
}
table ip kube-proxy {
    chain services { ip daddr 10.96.0.10 udp dport 53 counter; }
    chain nat-output { type nat hook output priority -100; policy accept; jump services; }
}
table ip6 kube-proxy {
    chain services { }
}
table inet kube-proxy {
    chain operator-named-it-so { }
}
"#;

fn nft(args: &[&str]) -> String {
    exec::run_stdout(Command::new("nft").args(args)).unwrap_or_else(|e| panic!("{e:#}"))
}

fn load(script: &str) {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), script).unwrap();
    exec::run(Command::new("nft").arg("-f").arg(file.path())).unwrap_or_else(|e| panic!("{e:#}"));
}

#[test]
fn the_nodes_bridge_and_chains_go_and_the_operators_rules_stay() {
    fresh_netns();
    load(NODE_AND_OPERATOR);
    exec::run(Command::new("ip").args(["link", "add", "cni0", "type", "bridge"])).unwrap();
    assert!(
        node_leftovers::plan().iter().any(|p| p.contains("ip filter")),
        "{:?}",
        node_leftovers::plan()
    );

    let mut report = ResetReport::default();
    node_leftovers::remove(&mut report);
    assert!(report.failed.is_empty(), "{report}");
    let tables = nft(&["list", "tables"]);
    assert_eq!(
        tables.lines().collect::<Vec<_>>(),
        ["table ip6 mangle", "table ip operator", "table inet kube-proxy"],
        "{report}"
    );
    let operator = nft(&["list", "table", "ip", "operator"]);
    assert!(operator.contains("tcp dport 22 accept"), "{operator}");
    let mangle = nft(&["list", "table", "ip6", "mangle"]);
    assert!(
        mangle.contains("chain OPERATOR") && !mangle.contains("KUBE-"),
        "{mangle}"
    );
    assert!(
        exec::run(Command::new("ip").args(["link", "show", "dev", "cni0"])).is_err(),
        "cni0 is still there"
    );
    for gone in [
        "link cni0",
        "nft table ip filter",
        "nft table ip nat",
        "nft table ip kube-proxy",
        "nft table ip6 kube-proxy",
    ] {
        assert!(
            report.removed.iter().any(|r| r == gone),
            "{gone} not reported: {report}"
        );
    }

    let mut again = ResetReport::default();
    node_leftovers::remove(&mut again);
    assert!(
        again.removed.is_empty() && again.failed.is_empty(),
        "a second run did something: {again}"
    );
    assert!(node_leftovers::plan().is_empty(), "{:?}", node_leftovers::plan());
}
