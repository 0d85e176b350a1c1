//! Waiting for the agent daemon to apply what a Machine (or the configuration it follows) asks
//! for: the active slot's applied config holds it, no operation is under way and the Machine's
//! `ConfigDrift` condition says `Applied`; a `False` condition fails the wait with its message.

use std::time::{Duration, Instant};

use agent::machina::Machine;
use anyhow::ensure;
use kube::api::Api;

use crate::node::JoinedNode;

/// How often the node and the Machine are read again.
const POLL: Duration = Duration::from_secs(3);

/// Waits until the daemon applied `what`: `applied_holds` is true of the active slot's applied
/// config (JSON), the install is idle and complete, and Machine `machine`'s `ConfigDrift` says
/// `Applied` — within ten times the node's deadline unit.
pub fn wait_until_applied(
    node: &JoinedNode,
    machine: &str,
    what: &str,
    applied_holds: impl Fn(&serde_json::Value) -> bool,
) -> anyhow::Result<()> {
    let _waiting = harness::phase_clock::enter(harness::phase_clock::Phase::Waiting);
    let deadline = Instant::now() + node.deadline(10);
    let machines: Api<Machine> = Api::all(node.client.clone());
    loop {
        let slot = node.machine()?;
        let applied = node
            .vm
            .run_unchecked(&format!("cat /etc/unbounded/agent/{slot}-applied-config.json"))?
            .stdout_text();
        let state = node
            .vm
            .run_unchecked(&format!("cat {}", agent::paths::INSTALL_STATE))?
            .stdout_text();
        let holds = serde_json::from_str::<serde_json::Value>(&applied)
            .ok()
            .is_some_and(|v| applied_holds(&v));
        let idle = serde_json::from_str::<serde_json::Value>(&state)
            .ok()
            .is_some_and(|v| v.get("operation").is_none() && v["stage"] == "complete");
        let condition = node
            .block_on(machines.get(machine))?
            .status
            .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "ConfigDrift"));
        let applied_condition = condition.as_ref().is_some_and(|c| c.reason == "Applied");
        if holds && idle && applied_condition {
            return Ok(());
        }
        if let Some(c) = condition.as_ref().filter(|c| c.status == "False") {
            anyhow::bail!("the daemon did not apply {what}: {}", c.message);
        }
        ensure!(
            Instant::now() < deadline,
            "{what} never reached the node: the applied config holds it: {holds}, idle {idle}, \
             ConfigDrift {condition:?}"
        );
        std::thread::sleep(POLL);
    }
}
