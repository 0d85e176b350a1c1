//! Every lab node has its Machine and runs the agent daemon (docs/lab.md, "Machines and the
//! daemon"): the daemon's unit is active on the host, and the Machine's status, written by that
//! daemon on its first pass, says the node runs what the Machine asks for.

use std::time::{Duration, Instant};

use agent::machina::{Machine, MachinePhase};
use anyhow::ensure;
use kube::api::Api;

use crate::node::JoinedNode;

/// Waits (up to `deadline`) until `unbounded-agent-daemon.service` is active on the node's host
/// and the node's Machine is phase `Ready` with `ConfigDrift` `True`/`InSync`; returns the Machine.
pub fn the_nodes_daemon_keeps_its_machine_in_sync(
    node: &JoinedNode,
    deadline: Duration,
) -> anyhow::Result<Machine> {
    let unit = agent::paths::DAEMON_UNIT_NAME;
    let name = node.deployed.name.clone();
    let machines: Api<Machine> = Api::all(node.client.clone());
    let until = Instant::now() + deadline;
    loop {
        let active = node
            .vm
            .run_unchecked(&format!("systemctl is-active {unit}"))?
            .stdout_text();
        let machine = node.block_on(machines.get_opt(&name))?;
        let status = machine.as_ref().and_then(|m| m.status.clone());
        let in_sync = status.as_ref().is_some_and(|s| {
            s.phase == Some(MachinePhase::Ready)
                && s.conditions
                    .iter()
                    .any(|c| c.type_ == "ConfigDrift" && c.status == "True" && c.reason == "InSync")
        });
        match machine {
            Some(machine) if active.trim() == "active" && in_sync => {
                eprintln!("==> Machine {name}: Ready, in sync, kept by the node's {unit}");
                return Ok(machine);
            }
            found => ensure!(
                Instant::now() < until,
                "after {deadline:?}: {unit} is {:?} on the node; Machine {name}: {}",
                active.trim(),
                match found {
                    None => "missing (the lab makes one for every node)".to_string(),
                    Some(_) => format!("status {status:?}"),
                }
            ),
        }
        std::thread::sleep(crate::cluster::API_POLL);
    }
}
