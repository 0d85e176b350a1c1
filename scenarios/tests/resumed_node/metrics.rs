//! The `metrics` check: on a joined LocalDNS node, the metrics endpoint answers at `<nodeIP>:9253`
//! when scraped from the lab network (outside the VM) with CoreDNS's series (`coredns_build_info`)
//! and the supervisor's beside them (not degraded, CoreDNS's endpoint up, the upstreams each
//! listener forwards to: the cluster DNS for the cluster listener); `coredns_cache_hits_total` of
//! the cluster listener rises when a `ClusterFirst` pod looks the same name up again and again;
//! and nothing else serves metrics: `ss` shows :9253 bound on the node IP only, by the supervisor
//! (no wildcard, no listener address), CoreDNS's own endpoint on loopback only, and connections
//! to the listeners' :9253 are refused, while the same connection to the node IP from the same
//! place succeeds.

use std::net::{Ipv4Addr, SocketAddr};

use anyhow::{Context, ensure};
use harness::vm::ExitKind;
use scenarios::cluster::{run_pod, wait_node_ready};
use scenarios::dns::{CLUSTER_LISTENER, DnsPolicy, NODE_LISTENER, Nslookup, Step, lookup_pod, parse_framed};
use scenarios::metrics::{Metrics, scrape_from_lab};
use scenarios::node::JoinedNode;

/// Spec §5: the metrics port when `MetricsAddress` is not configured.
const METRICS_PORT: u16 = 9253;
/// How many times the pod looks the same name up.
const LOOKUPS: usize = 10;
/// The lab upstream name the pod looks up, its address and TTL (long enough to stay cached).
const CACHED_NAME: &str = "metrics-cache.lab.test";
const CACHED_ADDRESS: Ipv4Addr = Ipv4Addr::new(10, 53, 0, 1);
const CACHED_TTL: u32 = 300;

/// The check this module's doc describes.
pub(crate) fn coredns_metrics_are_served_on_the_node_ip_only_and_count_pod_cache_hits(
    node: &mut JoinedNode,
) -> anyhow::Result<()> {
    let name = node.deployed.name.clone();
    let configured = node
        .deployed
        .config
        .local_dns
        .as_ref()
        .and_then(|l| l.metrics_address.clone());
    ensure!(
        configured.is_none(),
        "this scenario checks the derived metrics address, but the config sets MetricsAddress {configured:?}"
    );
    node.block_on(wait_node_ready(&node.client, &name, node.deadline(5)))?;
    let node_ip = node.deployed.node_ip;
    let addr = SocketAddr::from((node_ip, METRICS_PORT));

    eprintln!(
        "==> scraping http://{addr}/metrics from the lab's namespace {}",
        node.lab.name()
    );
    let before = scrape_from_lab(&node.lab, addr)?;
    build_info_is_served(&before)?;
    supervisor_series_are_served(&before, node)?;

    eprintln!("==> a ClusterFirst pod looks up {CACHED_NAME} {LOOKUPS} times");
    let cluster_hits = |m: &Metrics| {
        m.sum_where("coredns_cache_hits_total", |s| {
            s.label("server").contains(&CLUSTER_LISTENER.to_string())
        })
    };
    pod_looks_the_same_name_up_repeatedly(node)?;
    let after = scrape_from_lab(&node.lab, addr)?;
    let (hits_before, hits_after) = (cluster_hits(&before), cluster_hits(&after));
    eprintln!("==> cluster listener cache hits: {hits_before} before, {hits_after} after");
    // The first lookup may miss (and the upstream's first answer fill the cache); the rest hit.
    ensure!(
        hits_after - hits_before >= (LOOKUPS - 2) as f64,
        "coredns_cache_hits_total for the cluster listener {CLUSTER_LISTENER} rose by {} after {LOOKUPS} \
         lookups of the same name, expected at least {}.\nbefore:\n{}\nafter:\n{}",
        hits_after - hits_before,
        LOOKUPS - 2,
        before.describe("coredns_cache_hits_total"),
        after.describe("coredns_cache_hits_total")
    );
    ensure!(
        after.sum("coredns_cache_hits_total") > before.sum("coredns_cache_hits_total"),
        "the sum of coredns_cache_hits_total did not rise:\n{}",
        after.describe("coredns_cache_hits_total")
    );

    metrics_listen_on_the_node_ip_only(node, node_ip)?;
    listeners_refuse_metrics_connections(node, node_ip)
}

/// `coredns_build_info{version=...} 1`, exactly one.
fn build_info_is_served(metrics: &Metrics) -> anyhow::Result<()> {
    let info: Vec<_> = metrics.samples("coredns_build_info").collect();
    ensure!(
        info.len() == 1 && info[0].value == 1.0 && !info[0].label("version").is_empty(),
        "expected one coredns_build_info sample with a version and value 1, saw:\n{}",
        metrics.describe("coredns_build_info")
    );
    eprintln!("==> coredns_build_info: version {}", info[0].label("version"));
    Ok(())
}

/// The supervisor's series beside CoreDNS's: not on the fallback, CoreDNS's endpoint answered, a
/// standby ready, no restart yet on this fresh node, and the upstreams in use — the config's
/// cluster DNS for the cluster listener, at least one for the node listener.
fn supervisor_series_are_served(metrics: &Metrics, node: &JoinedNode) -> anyhow::Result<()> {
    let value = |name: &str| metrics.samples(name).next().map(|s| s.value);
    for (name, wanted) in [
        ("localdns_supervisor_fallback", 0.0),
        ("localdns_supervisor_coredns_metrics_up", 1.0),
        ("localdns_supervisor_standby_ready", 1.0),
    ] {
        ensure!(
            value(name) == Some(wanted),
            "{name} should be {wanted}:\n{}",
            metrics.describe(name)
        );
    }
    ensure!(
        metrics.has("localdns_supervisor_coredns_restarts_total")
            && metrics.has("localdns_supervisor_standby_takeovers_total"),
        "the supervisor's counters are missing:\n{}",
        metrics.describe("localdns_supervisor_coredns_restarts_total")
    );
    let cluster_dns = node
        .deployed
        .config
        .cluster
        .as_ref()
        .and_then(|c| c.cluster_dns.clone())
        .context("the deployed config has no Cluster.ClusterDNS")?;
    let upstreams = |listener: &str| -> Vec<String> {
        metrics
            .samples("localdns_supervisor_upstream_info")
            .filter(|s| s.label("listener") == listener)
            .map(|s| s.label("upstream").to_string())
            .collect()
    };
    ensure!(
        upstreams("cluster") == [cluster_dns.to_string()] && !upstreams("node").is_empty(),
        "localdns_supervisor_upstream_info should name {cluster_dns} for the cluster listener and the \
         host's resolvers for the node listener:\n{}",
        metrics.describe("localdns_supervisor_upstream_info")
    );
    eprintln!(
        "==> the supervisor's series: upstreams node {:?}, cluster {:?}",
        upstreams("node"),
        upstreams("cluster")
    );
    Ok(())
}

/// A `ClusterFirst` pod looks up [`CACHED_NAME`] [`LOOKUPS`] times; every lookup goes through
/// the cluster listener and answers [`CACHED_ADDRESS`].
fn pod_looks_the_same_name_up_repeatedly(node: &JoinedNode) -> anyhow::Result<()> {
    node.lab.dns().set_a(CACHED_NAME, &[CACHED_ADDRESS], CACHED_TTL)?;
    let steps: Vec<Step> = (1..=LOOKUPS)
        .map(|i| Step::nslookup(&format!("lookup-{i}"), "a", &format!("{CACHED_NAME}.")))
        .collect();
    let pod = lookup_pod(
        "metrics-cache-hits",
        &node.deployed.name,
        &node.artifacts.test_image_ref,
        DnsPolicy::ClusterFirst,
        &steps,
    )?;
    let finished = node
        .block_on(run_pod(&node.client, "default", &pod, node.deadline(3)))
        .context("running the pod that looks the same name up repeatedly")?;
    let framed = parse_framed(&finished.log)?;
    ensure!(
        framed.len() == LOOKUPS,
        "the pod ran {} of {LOOKUPS} lookups:\n{}",
        framed.len(),
        finished.log
    );
    for lookup in &framed {
        let answer = Nslookup::parse(lookup.ensure_success()?)?;
        ensure!(
            answer.server == Some(CLUSTER_LISTENER.into())
                && answer.addresses_of(CACHED_NAME) == [std::net::IpAddr::V4(CACHED_ADDRESS)],
            "lookup {} did not answer {CACHED_ADDRESS} through {CLUSTER_LISTENER}:\n{}",
            lookup.label,
            lookup.output
        );
    }
    let upstream = node.lab.dns().query_count(CACHED_NAME)?;
    eprintln!("==> {LOOKUPS} pod lookups; the lab upstream saw {upstream} queries for {CACHED_NAME}");
    Ok(())
}

/// The local address column of an `ss -Hltnp` line (`LISTEN 0 4096 <local> <peer> users:...`).
fn local_address(line: &str) -> Option<&str> {
    line.split_whitespace().nth(3)
}

/// `ss -Hltnp` on the host shows :9253 bound by the supervisor on `<nodeIP>:9253` and nowhere
/// else, and CoreDNS listening on the listeners and its loopback metrics address only.
fn metrics_listen_on_the_node_ip_only(node: &JoinedNode, node_ip: Ipv4Addr) -> anyhow::Result<()> {
    let ss = node.vm.run("ss -Hltnp")?;
    let suffix = format!(":{METRICS_PORT}");
    let bound: Vec<&str> = ss
        .lines()
        .filter(|l| local_address(l).is_some_and(|a| a.ends_with(&suffix)))
        .collect();
    let expected = format!("{node_ip}:{METRICS_PORT}");
    ensure!(
        !bound.is_empty(),
        "nothing listens on port {METRICS_PORT}; `ss -Hltnp`:\n{ss}"
    );
    for line in &bound {
        ensure!(
            local_address(line) == Some(expected.as_str()),
            "port {METRICS_PORT} is bound on {:?}, expected only {expected} (no wildcard, no \
             listener address):\n{}",
            local_address(line),
            bound.join("\n")
        );
        // `ss` shows the first 15 characters of the program's name.
        ensure!(
            line.contains("\"unbounded-local\""),
            "{expected} is not the LocalDNS supervisor's: {line}"
        );
    }
    // No other port either (e.g. a `prometheus` without an address would take :9153 on every
    // address): CoreDNS listens for TCP on the listeners' :53 and :8181 and its own metrics
    // address on loopback, which the supervisor passes on.
    let allowed: Vec<String> = [NODE_LISTENER, CLUSTER_LISTENER]
        .iter()
        .flat_map(|l| [format!("{l}:53"), format!("{l}:8181")])
        .chain([agent::corefile::COREDNS_METRICS_ADDRESS.to_string()])
        .collect();
    // The one exception: the warm standby CoreDNS of the supervisor and of the spare
    // (`localdns-spare.service`; docs/localdns.md) each hold a placeholder on one loopback port,
    // and none of the sockets above.
    let coredns: Vec<&str> = ss.lines().filter(|l| l.contains("\"coredns\"")).collect();
    let pid_of = |line: &str| -> String {
        line.split("pid=")
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .unwrap_or_default()
            .to_string()
    };
    let serving: std::collections::BTreeSet<String> = coredns
        .iter()
        .filter(|l| allowed.iter().any(|a| Some(a.as_str()) == local_address(l)))
        .map(|l| pid_of(l))
        .collect();
    let placeholders: Vec<&&str> = coredns
        .iter()
        .filter(|l| {
            !serving.contains(&pid_of(l)) && local_address(l).is_some_and(|a| a.starts_with("127.0.0.1:"))
        })
        .collect();
    ensure!(
        placeholders.len() <= 2,
        "more than two loopback placeholders of standby CoreDNS (the supervisor's, the spare's):\n{}",
        coredns.join("\n")
    );
    for line in &coredns {
        let local = local_address(line).unwrap_or("?");
        ensure!(
            allowed.iter().any(|a| a == local) || placeholders.contains(&line),
            "CoreDNS listens on {local}, which is none of {allowed:?} (a wildcard or another \
             port):\n{}",
            coredns.join("\n")
        );
    }
    Ok(())
}

/// From the host, `curl` to the listeners' :9253 is refused (exit 7, `Connection refused` in its
/// verbose log: a reset, not a timeout or a route error), and the same `curl` to
/// `<nodeIP>:9253` gets the metrics (so a refusal is not curl failing for another reason).
fn listeners_refuse_metrics_connections(node: &JoinedNode, node_ip: Ipv4Addr) -> anyhow::Result<()> {
    let curl = |ip: Ipv4Addr| {
        node.vm.run_unchecked(&format!(
            "curl --verbose --silent --show-error --noproxy '*' --max-time 10 \
             http://{ip}:{METRICS_PORT}/metrics"
        ))
    };
    let control = curl(node_ip)?;
    ensure!(
        control.success() && control.stdout_text().contains("coredns_build_info"),
        "curl from the host to {node_ip}:{METRICS_PORT} did not get the metrics ({}): {}",
        control.status,
        control.stderr_text()
    );
    for listener in [NODE_LISTENER, CLUSTER_LISTENER] {
        let out = curl(listener)?;
        ensure!(
            out.status == ExitKind::Code(7) && out.stderr_text().contains("Connection refused"),
            "connecting to {listener}:{METRICS_PORT} from the host was not refused ({}):\n\
             stdout: {}\nstderr: {}",
            out.status,
            out.stdout_text().chars().take(400).collect::<String>(),
            out.stderr_text()
        );
    }
    Ok(())
}

#[test]
fn the_local_address_is_the_fourth_column_of_ss() {
    let line =
        "LISTEN 0      4096   192.168.101.10:9253      0.0.0.0:*    users:((\"coredns\",pid=812,fd=9))";
    assert_eq!(local_address(line), Some("192.168.101.10:9253"));
    assert_eq!(local_address("LISTEN 0 4096 [::]:9253 [::]:*"), Some("[::]:9253"));
}
