//! The checkpoint's checks: a node resumed from its joined-node checkpoint (docs/lab.md,
//! "Joined-node checkpoints") is a node of this lab's cluster as a joined one is — the guest's clock is the
//! host's, the VM has the node's address and the Node reports it, the kubelet renewed its Lease
//! in this cluster after the resume (its client certificate is accepted) and reached it at its
//! first retry (no wait on the saved lab's neighbour entries), a new pod is scheduled
//! and resolves through the cluster listener, the machine resolves a lab name through the node
//! listener, and the host has its LocalDNS link and NOTRACK table. Fails when the node was not
//! resumed (e.g. `LAB_NO_CHECKPOINT=1`): then it would prove nothing about checkpoints. They run
//! first on the resumed node (the clock and the Lease are read right after the resume).

use std::net::Ipv4Addr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use scenarios::dns::{CLUSTER_LISTENER, in_machine};
use scenarios::host_state::{LINK, NFT_FAMILY, NFT_TABLE, read_link, read_nft_table};
use scenarios::node::JoinedNode;
use scenarios::pod_dns::a_cluster_first_pod_resolves_the_kubernetes_service_through;

/// How far the guest's clock may be from the host's right after the resume.
const CLOCK_TOLERANCE: f64 = 2.0;
/// How old the Lease's last renewal may be (the kubelet renews every 10 s).
const LEASE_FRESH: Duration = Duration::from_secs(60);

/// The node was resumed from a checkpoint and is a working node of the new lab's cluster.
pub(crate) fn a_node_resumed_from_its_checkpoint_is_a_working_node_of_the_new_labs_cluster(
    node: &mut JoinedNode,
) -> anyhow::Result<()> {
    let checkpoint = node.checkpoint.clone().with_context(|| {
        format!(
            "the node joined for real instead of resuming from a checkpoint ({}={:?}): this \
             check needs checkpoints on",
            harness::checkpoint::NO_CHECKPOINT_ENV,
            std::env::var(harness::checkpoint::NO_CHECKPOINT_ENV).ok()
        )
    })?;
    eprintln!(
        "==> resumed from {} in {:.1}s",
        checkpoint.display(),
        node.vm.boot_time().as_secs_f64()
    );
    the_guest_clock_is_the_hosts(node)?;
    the_vm_and_the_node_have_the_nodes_address(node)?;
    the_kubelet_renewed_its_lease_after_the_resume(node)?;
    the_kubelet_reached_the_cluster_at_its_first_retry(node, &checkpoint)?;
    a_cluster_first_pod_resolves_the_kubernetes_service_through(node, CLUSTER_LISTENER)?;
    the_machine_resolves_a_lab_name(node)?;
    the_host_has_its_localdns_link_and_table(node)
}

fn host_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

fn the_guest_clock_is_the_hosts(node: &JoinedNode) -> anyhow::Result<()> {
    let before = host_now();
    let guest: f64 = node
        .vm
        .run("date +%s.%N")?
        .trim()
        .parse()
        .context("parsing the guest's date")?;
    let after = host_now();
    let skew = if guest < before {
        guest - before
    } else if guest > after {
        guest - after
    } else {
        0.0
    };
    ensure!(
        skew.abs() <= CLOCK_TOLERANCE,
        "the guest's clock is {skew:.3} s off the host's after the resume"
    );
    eprintln!("==> guest clock within {:.3} s of the host's", skew.abs());
    Ok(())
}

fn the_vm_and_the_node_have_the_nodes_address(node: &JoinedNode) -> anyhow::Result<()> {
    let ip = node.deployed.node_ip;
    let addrs = node.vm.run("ip -4 -o addr show scope global")?;
    ensure!(
        addrs.contains(&format!(" {ip}/24 ")),
        "the resumed VM does not have the node's address {ip}:\n{addrs}"
    );
    let nic = node.nic()?;
    ensure!(nic.ip == ip, "the lab gave the VM {}, the node is {ip}", nic.ip);
    let name = &node.deployed.name;
    let k8s_node = node
        .block_on(Api::<Node>::all(node.client.clone()).get(name))
        .with_context(|| format!("reading Node {name}"))?;
    let internal: Vec<String> = k8s_node
        .status
        .and_then(|s| s.addresses)
        .unwrap_or_default()
        .into_iter()
        .filter(|a| a.type_ == "InternalIP")
        .map(|a| a.address)
        .collect();
    ensure!(
        internal == [ip.to_string()],
        "Node {name} reports InternalIP {internal:?}, the node's address is {ip}"
    );
    Ok(())
}

fn the_kubelet_renewed_its_lease_after_the_resume(node: &JoinedNode) -> anyhow::Result<()> {
    let name = &node.deployed.name;
    let lease = node
        .block_on(Api::<Lease>::namespaced(node.client.clone(), "kube-node-lease").get(name))
        .with_context(|| format!("reading Lease kube-node-lease/{name}"))?;
    let spec = lease.spec.unwrap_or_default();
    let renewed = spec
        .renew_time
        .with_context(|| format!("Lease kube-node-lease/{name} has no renewTime"))?
        .0
        .as_second();
    let age = host_now() - renewed as f64;
    ensure!(
        age <= LEASE_FRESH.as_secs_f64(),
        "the kubelet's Lease was last renewed {age:.0} s ago (holder {:?}): the resumed kubelet \
         does not reach this cluster",
        spec.holder_identity
    );
    eprintln!("==> Lease kube-node-lease/{name} renewed {age:.0} s ago");
    Ok(())
}

/// How many Lease updates may fail after the resume for another reason than a connection the
/// resume closed (for instance one timing out while the guest's neighbours are learnt again).
const LEASE_FAILURES_AFTER_RESUME: usize = 1;

/// What the kubelet logs for a connection the resume itself closed: the new lab's API server
/// resets every connection the saved node had open (`connection reset by peer`, on a read or on a
/// write, once per connection the kubelet's client still held), and right after the VM resumes
/// `ss -K` ends the guest's connections to the saved API server (`harness::checkpoint::node`),
/// which can catch one the kubelet had just opened again (`software caused connection abort`).
const CLOSED_BY_THE_RESUME: [&str; 2] = ["connection reset by peer", "software caused connection abort"];

/// The kubelet's Lease updates logged since the checkpoint was saved (so after the resume: the
/// VM was paused in between) failed at most once for another reason than a connection the resume
/// closed ([`CLOSED_BY_THE_RESUME`]): the resumed guest reaches the new lab at once. A guest still
/// sending to the saved lab's bridge MAC failed 4–5 times in ~55 s (timeouts).
fn the_kubelet_reached_the_cluster_at_its_first_retry(
    node: &JoinedNode,
    checkpoint: &std::path::Path,
) -> anyhow::Result<()> {
    let info = checkpoint.join(harness::checkpoint::INFO);
    let saved = std::fs::metadata(&info)
        .and_then(|m| m.modified())
        .with_context(|| format!("reading when {} was saved", info.display()))?
        .duration_since(UNIX_EPOCH)?
        .as_secs();
    let machine = node.machine()?;
    let journal = node.vm.run(&format!(
        "journalctl -M {machine} -u kubelet --no-pager -o short-unix --since @{saved} \
         | grep -F 'Failed to update lease' || true"
    ))?;
    let failures = journal
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| !CLOSED_BY_THE_RESUME.iter().any(|closed| l.contains(closed)))
        .count();
    ensure!(
        failures <= LEASE_FAILURES_AFTER_RESUME,
        "the resumed kubelet failed to update its Lease {failures} times for another reason than \
         a connection the resume closed (at most {LEASE_FAILURES_AFTER_RESUME} may):\n{journal}"
    );
    eprintln!("==> the resumed kubelet's Lease updates failed {failures} time(s) besides closed connections");
    Ok(())
}

fn the_machine_resolves_a_lab_name(node: &JoinedNode) -> anyhow::Result<()> {
    let machine = node.machine()?;
    let name = format!("checkpoint-{}.upstream.test.", std::process::id());
    let ip = Ipv4Addr::new(10, 77, 0, 20);
    node.lab.dns().set_a(&name, &[ip], 300)?;
    let out = node
        .vm
        .run(&in_machine(&machine, &format!("getent ahostsv4 {name}")))
        .with_context(|| format!("resolving {name} inside machine {machine}"))?;
    ensure!(
        out.split_whitespace().next() == Some(ip.to_string().as_str()),
        "inside {machine}, `getent ahostsv4 {name}` should give {ip}:\n{out}"
    );
    Ok(())
}

fn the_host_has_its_localdns_link_and_table(node: &JoinedNode) -> anyhow::Result<()> {
    ensure!(
        read_link(&node.vm, LINK)?.is_some(),
        "the resumed host has no {LINK} link"
    );
    let table = read_nft_table(&node.vm, NFT_FAMILY, NFT_TABLE)?
        .with_context(|| format!("the resumed host has no nft table {NFT_FAMILY} {NFT_TABLE}"))?;
    let notrack = table.rules.iter().filter(|r| r.contains("notrack")).count();
    ensure!(
        notrack == 16,
        "the resumed host's table {NFT_FAMILY} {NFT_TABLE} holds {notrack} notrack rules, not 16:\n{:#?}",
        table.rules
    );
    Ok(())
}
