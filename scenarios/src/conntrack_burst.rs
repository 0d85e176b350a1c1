//! A burst of pod queries to both listeners while conntrack is read: no entry may involve a
//! listener address (docs/design.md §6, NOTRACK). Run by the `notrack` check of the `resumed_node` scenario and, after a host
//! reboot, by the lifecycle scenario.

use std::cell::Cell;
use std::net::Ipv4Addr;
use std::time::Duration;

use anyhow::{Context, ensure};

use crate::cluster::{FinishedPod, run_pod, test_pod};
use crate::dns::{CLUSTER_LISTENER, NODE_LISTENER};
use crate::host_state::{ConntrackEntry, read_conntrack};
use crate::node::JoinedNode;

/// Lookups per pod and target, with a conntrack read every 5 s and the supervisor's probes (every
/// 12 s) going on all along: the whole `notrack` case took 69–73 s with 100 in a cold run; 200
/// took 3–6 min, the longest step of the default suite, for no more of what is
/// checked.
const BURST: usize = 100;
/// The lab upstream name the `Default` pod looks up.
const BURST_NAME: &str = "burst.lab.test";
/// The cluster DNS Service address (`Cluster.ClusterDNS`): tracked, so the control.
const CLUSTER_DNS: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 10);
/// How often conntrack is read while the pods run.
const READ_EVERY: Duration = Duration::from_secs(5);

/// A pod's shell loop: `BURST` times, each `(label, nslookup args, server it must name)`
/// lookup; counts the lookups that succeeded through that server and prints `label=<count>`.
fn burst_script(lookups: &[(&str, String, Ipv4Addr)]) -> String {
    let mut script = String::from("n=0\n");
    for (label, _, _) in lookups {
        script += &format!("{}=0\n", label.replace('-', "_"));
    }
    script += &format!("while [ $n -lt {BURST} ]; do\n");
    for (label, args, server) in lookups {
        let var = label.replace('-', "_");
        script += &format!(
            "  o=$(nslookup {args} 2>&1) && echo \"$o\" | grep -q '^Server:[[:space:]]*{server}$' && {var}=$(({var}+1))\n"
        );
    }
    script += "  n=$((n+1))\ndone\n";
    for (label, _, _) in lookups {
        script += &format!("echo \"{label}=${}\"\n", label.replace('-', "_"));
    }
    script
}

/// The count `label=<n>` a [`burst_script`] printed.
fn burst_count(log: &str, label: &str) -> anyhow::Result<usize> {
    log.lines()
        .find_map(|l| l.strip_prefix(&format!("{label}=")))
        .with_context(|| format!("the pod printed no {label}= count:\n{log}"))?
        .trim()
        .parse()
        .with_context(|| format!("the {label} count is not a number:\n{log}"))
}

/// Two pods query both listeners `BURST` times each (a `ClusterFirst` pod the cluster listener
/// through its resolv.conf, a `dnsPolicy: Default` pod the node listener through its), and each
/// also queries a DNS server that is not a listener (the cluster DNS Service, the lab upstream).
/// conntrack is read every few seconds while they run and once right after: no read holds an
/// entry to or from a listener address (DNS, the supervisor's `/ready` probes every 12 s, any
/// port), and the reads hold each pod's control queries.
pub fn listener_queries_leave_no_conntrack_entries(node: &JoinedNode) -> anyhow::Result<()> {
    let upstream = node.lab.addrs().bridge_ip();
    node.lab
        .dns()
        .set_a(BURST_NAME, &[Ipv4Addr::new(10, 53, 0, 2)], 300)?;
    let kubernetes = "kubernetes.default.svc.cluster.local.";
    let cluster_first = burst_script(&[
        (
            "via-cluster-listener",
            format!("-type=a {kubernetes}"),
            CLUSTER_LISTENER,
        ),
        (
            "via-cluster-dns",
            format!("-type=a {kubernetes} {CLUSTER_DNS}"),
            CLUSTER_DNS,
        ),
    ]);
    let default = burst_script(&[
        (
            "via-node-listener",
            format!("-type=a {BURST_NAME}."),
            NODE_LISTENER,
        ),
        (
            "via-lab-upstream",
            format!("-type=a {BURST_NAME}. {upstream}"),
            upstream,
        ),
    ]);
    let image = &node.artifacts.test_image_ref;
    let a = test_pod(
        "notrack-cluster-first",
        &node.deployed.name,
        image,
        &["/bin/sh", "-c", &cluster_first],
    );
    let mut b = test_pod(
        "notrack-default",
        &node.deployed.name,
        image,
        &["/bin/sh", "-c", &default],
    );
    b.spec.as_mut().context("a test pod has a spec")?.dns_policy = Some("Default".into());

    eprintln!("==> two pods query the listeners {BURST} times each; reading conntrack meanwhile");
    let done = Cell::new(false);
    // 200 lookups per pod took 3-6 minutes under TCG; beside two other VMs the ClusterFirst pod
    // was still running after 10, so 20 for 100 (a deadline, not a timed check).
    let timeout = node.deadline(10);
    let pods = async {
        let both = tokio::join!(
            run_pod(&node.client, "default", &a, timeout),
            run_pod(&node.client, "default", &b, timeout)
        );
        done.set(true);
        both
    };
    let reads = async {
        let mut reads: Vec<anyhow::Result<Vec<ConntrackEntry>>> = Vec::new();
        while !done.get() {
            reads.push(read_conntrack(&node.vm));
            tokio::time::sleep(READ_EVERY).await;
        }
        reads.push(read_conntrack(&node.vm));
        reads
    };
    let ((a, b), reads) = node.block_on(async { tokio::join!(pods, reads) });
    let a = a.context("running the ClusterFirst burst pod")?;
    let b = b.context("running the Default burst pod")?;
    let reads: Vec<Vec<ConntrackEntry>> = reads.into_iter().collect::<anyhow::Result<_>>()?;

    for (pod, label) in [
        (&a, "via-cluster-listener"),
        (&a, "via-cluster-dns"),
        (&b, "via-node-listener"),
        (&b, "via-lab-upstream"),
    ] {
        let count = burst_count(&pod.log, label)?;
        eprintln!("==> {label}: {count} of {BURST} lookups answered through the expected server");
        ensure!(
            count * 100 >= BURST * 95,
            "only {count} of {BURST} lookups {label} succeeded through the expected server:\n{}",
            pod.log
        );
    }

    let tracked_listener: Vec<&ConntrackEntry> = reads
        .iter()
        .flatten()
        .filter(|e| {
            [NODE_LISTENER, CLUSTER_LISTENER]
                .iter()
                .any(|l| e.involves(&l.to_string()))
        })
        .collect();
    ensure!(
        tracked_listener.is_empty(),
        "conntrack tracked traffic to or from a listener address during the burst ({} entries over {} \
         reads):\n{}",
        tracked_listener.len(),
        reads.len(),
        tracked_listener
            .iter()
            .take(20)
            .map(|e| e.line.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    );

    let control = |pod: &FinishedPod, server: Ipv4Addr| -> anyhow::Result<usize> {
        let ip = pod.ip().context("a burst pod has no podIP")?;
        Ok(reads
            .iter()
            .flatten()
            .filter(|e| e.original.src == ip && e.original.touches(&server.to_string(), 53))
            .count())
    };
    let (seen_a, seen_b) = (control(&a, CLUSTER_DNS)?, control(&b, upstream)?);
    eprintln!(
        "==> {} conntrack reads: 0 entries for the listener addresses; control entries: {seen_a} \
         pod→{CLUSTER_DNS}:53, {seen_b} pod→{upstream}:53",
        reads.len()
    );
    ensure!(
        seen_a > 0 && seen_b > 0,
        "the conntrack reads did not see the pods' queries to non-listener servers ({seen_a} to \
         {CLUSTER_DNS}:53, {seen_b} to {upstream}:53), so they cannot show that listener queries are \
         untracked; last read:\n{}",
        reads
            .last()
            .map(|r| r.iter().map(|e| e.line.as_str()).collect::<Vec<_>>().join("\n"))
            .unwrap_or_default()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_burst_script_counts_each_lookup_through_its_server() {
        let script = burst_script(&[("via-x", "-type=a a.test.".into(), Ipv4Addr::new(10, 0, 0, 1))]);
        assert!(script.contains(&format!("while [ $n -lt {BURST} ]")), "{script}");
        assert!(
            script.contains(
                "o=$(nslookup -type=a a.test. 2>&1) && echo \"$o\" | grep -q '^Server:[[:space:]]*10.0.0.1$' && via_x=$((via_x+1))"
            ),
            "{script}"
        );
        assert!(script.ends_with("echo \"via-x=$via_x\"\n"), "{script}");
        assert_eq!(burst_count("x\nvia-x=197\n", "via-x").unwrap(), 197);
        assert!(burst_count("via-y=1\n", "via-x").is_err());
    }
}
