//! The `network_repair` check: the `localdns` link and our nft table, deleted by hand on the
//! node's host, come back by the agent daemon's next pass (it checks the host network on every
//! pass, at least once per 60 s resync), exactly as designed; the Machine's condition
//! `HostNetwork` says what was restored, both listeners answer DNS again and the Node is Ready
//! (a kubelet stopped with LocalDNS meanwhile is started again).

use std::time::{Duration, Instant};

use agent::machina::Machine;
use anyhow::Context;
use harness::wait::{Attempt, retry, wait_until};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::Api;
use scenarios::cluster::wait_node_ready;
use scenarios::dns::{CLUSTER_LISTENER, NODE_LISTENER};
use scenarios::host_state::{LINK, NFT_FAMILY, NFT_TABLE};
use scenarios::node::JoinedNode;

use super::notrack::{link_is_exactly_the_designed_one, table_is_exactly_the_designed_one};

/// One resync (60 s) and the pass itself, with room for a loaded 2-core machine under TCG.
const RESTORED_WITHIN: Duration = Duration::from_secs(120);
/// CoreDNS may have been restarted by its supervisor while its addresses were gone.
const ANSWERING_WITHIN: Duration = Duration::from_secs(180);

/// The check this module's doc describes.
pub(crate) fn a_link_and_table_removed_by_hand_are_restored_by_the_daemon(
    node: &mut JoinedNode,
) -> anyhow::Result<()> {
    node.vm
        .run(&format!(
            "ip link delete {LINK} && nft delete table {NFT_FAMILY} {NFT_TABLE}"
        ))
        .context("deleting the link and the table by hand")?;
    let removed = Instant::now();
    let removed_at = k8s_openapi::jiff::Timestamp::now() - Duration::from_secs(2);
    eprintln!("==> deleted link {LINK} and table {NFT_FAMILY} {NFT_TABLE} on the host");
    let vm = &node.vm;
    wait_until::<(), anyhow::Error>(
        format!("VM {}", vm.name()),
        RESTORED_WITHIN,
        format!("the daemon to restore link {LINK} and table {NFT_FAMILY} {NFT_TABLE}"),
        || match vm.run_unchecked(&format!(
            "ip link show {LINK} >/dev/null && nft list table {NFT_FAMILY} {NFT_TABLE} >/dev/null"
        )) {
            Ok(out) if out.success() => Attempt::Ready(()),
            Ok(out) => retry(out.stderr_text().trim()),
            Err(err) => retry(err),
        },
    )?;
    eprintln!(
        "==> figure: the daemon restored the host network {:.1}s after it was deleted",
        removed.elapsed().as_secs_f64()
    );
    link_is_exactly_the_designed_one(node)?;
    table_is_exactly_the_designed_one(node)?;
    // The daemon restores first and then writes the condition; one from before the deletion
    // does not count.
    let since = removed_at;
    let condition = wait_until::<_, anyhow::Error>(
        format!("Machine {}", node.deployed.name),
        Duration::from_secs(30),
        "its condition HostNetwork to say what the daemon restored",
        || match host_network_condition(node) {
            Ok(c) if c.last_transition_time.0 >= since => Attempt::Ready(c),
            Ok(c) => retry(format!("only an older one: {c:?}")),
            Err(err) => retry(err),
        },
    )?;
    anyhow::ensure!(
        condition.status == "True"
            && condition.reason == "Repaired"
            && condition.message.contains("restored the LocalDNS host network")
            && condition.message.contains(LINK),
        "Machine {}'s condition HostNetwork does not say what was restored: {condition:?}",
        node.deployed.name
    );
    let answered = Instant::now();
    wait_until::<(), anyhow::Error>(
        format!("VM {}", vm.name()),
        ANSWERING_WITHIN,
        "both listeners to answer again",
        || {
            let health = agent::corefile::HEALTH_NAME;
            let script = format!(
                "for l in {NODE_LISTENER} {CLUSTER_LISTENER}; do \
                 dig +time=2 +tries=1 @$l {health} +noall +comments | grep -q 'status: NOERROR' \
                 || {{ echo \"$l does not answer\"; exit 1; }}; done"
            );
            match vm.run_unchecked(&script) {
                Ok(out) if out.success() => Attempt::Ready(()),
                Ok(out) => retry(out.stdout_text().trim()),
                Err(err) => retry(err),
            }
        },
    )?;
    eprintln!(
        "==> figure: both listeners answered {:.1}s after the repair was seen",
        answered.elapsed().as_secs_f64()
    );
    // Kubelet requires LocalDNS: if it went down with it, the daemon started it again.
    let name = node.deployed.name.clone();
    node.block_on(wait_node_ready(&node.client, &name, node.deadline(5)))?;
    Ok(())
}

/// The Machine's `HostNetwork` condition.
fn host_network_condition(node: &JoinedNode) -> anyhow::Result<Condition> {
    let machines: Api<Machine> = Api::all(node.client.clone());
    let name = &node.deployed.name;
    let machine = node.block_on(machines.get(name))?;
    machine
        .status
        .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "HostNetwork"))
        .with_context(|| format!("Machine {name} has no condition HostNetwork after the repair"))
}
