//! A planned restart of `localdns.service` (a new supervisor, a changed Corefile or unit) with
//! something answering on the listeners throughout: `localdns-bridge.service` is started first,
//! and the agent waits until its CoreDNS holds each listener beside the running one (two UDP and
//! two TCP sockets bound to `<listener>:53`, which CoreDNS's `SO_REUSEPORT` allows); then
//! `localdns.service` restarts, and once its new CoreDNS holds the listeners again beside the
//! bridge, the bridge stops. A bridge that does not come up is stopped and the restart goes on
//! without it, saying so (DNS is then down for the start of the new CoreDNS, as before); so does
//! a restart onto listeners nothing holds yet (a config that moves them).
//! The unit bridges any other restart itself (an operator's `systemctl restart localdns`;
//! `supervisor::restart_bridge`), and leaves a bridge the agent started to the agent.

use std::net::Ipv4Addr;
use std::time::Duration;

use super::StartError;
use super::node::{self, Waits};
use crate::machine::MachineRunner;
use crate::machine::machinectl::{MachineError, poll};
use crate::progress::Progress;
use crate::validate::Config;

/// The unit that bridges a restart (`render::units::bridge_service`).
pub use crate::supervisor::restart_bridge::BRIDGE_UNIT;
/// How long the bridge's or the new CoreDNS's sockets are waited for, before the timeout scale.
pub const BOUND_TIMEOUT: Duration = Duration::from_secs(30);
const BOUND_POLL: Duration = Duration::from_millis(200);

/// Restarts `localdns.service` in `runner`'s machine bridged by `localdns-bridge.service`, and
/// waits until both listeners are ready; with LocalDNS off in `config`, a plain restart.
pub fn restart_localdns(
    runner: &MachineRunner,
    config: &Config,
    waits: Waits,
    p: &dyn Progress,
) -> Result<(), StartError> {
    let Some(l) = &config.local_dns else {
        runner.run(&["systemctl", "restart", "localdns.service"])?;
        return Ok(());
    };
    let listeners = [l.node_listener.addr(), l.cluster_listener.addr()];
    let bound_timeout = BOUND_TIMEOUT * waits.scale.max(1);
    // Listeners that nothing holds yet (a config moving them): nothing to keep answering.
    if wait_bound(&listeners, 1, Duration::ZERO).is_err() {
        p.line("nothing answers on the listeners yet; restarting localdns.service without a bridge");
        runner.run(&["systemctl", "restart", "localdns.service"])?;
        node::localdns_ready(config, waits, p)?;
        return Ok(());
    }
    let bridged = match start_bridge(runner, &listeners, bound_timeout) {
        Ok(()) => {
            p.line(&format!("{BRIDGE_UNIT} answers on the listeners beside CoreDNS"));
            true
        }
        Err(err) => {
            p.line(&format!(
                "warning: no bridge for the restart of localdns.service ({err}); \
                 the listeners are down until the new CoreDNS answers"
            ));
            stop_bridge(runner)?;
            false
        }
    };
    let restarted = (|| -> Result<(), StartError> {
        runner.run(&["systemctl", "restart", "localdns.service"])?;
        node::localdns_ready(config, waits, p)?;
        if bridged {
            // The old CoreDNS's sockets are gone; two again means the new one is bound.
            wait_bound(&listeners, 2, bound_timeout)?;
        }
        Ok(())
    })();
    if bridged {
        stop_bridge(runner)?;
        p.line(&format!("stopped {BRIDGE_UNIT}"));
    }
    restarted
}

/// Starts the bridge and waits until it holds every listener beside the running CoreDNS.
fn start_bridge(runner: &MachineRunner, listeners: &[Ipv4Addr], timeout: Duration) -> Result<(), StartError> {
    runner.run(&["systemctl", "start", BRIDGE_UNIT])?;
    wait_bound(listeners, 2, timeout)?;
    Ok(())
}

fn stop_bridge(runner: &MachineRunner) -> Result<(), StartError> {
    runner.run(&["systemctl", "stop", BRIDGE_UNIT])?;
    Ok(())
}

/// Waits until at least `sockets` UDP and `sockets` TCP listening sockets are bound to port 53 of
/// each listener (the machine shares the host's network, so the host sees them).
pub fn wait_bound(listeners: &[Ipv4Addr], sockets: usize, timeout: Duration) -> Result<(), MachineError> {
    poll(
        &format!("{sockets} CoreDNS sockets (UDP and TCP) on port 53 of {listeners:?}"),
        timeout,
        BOUND_POLL,
        || {
            let bound = crate::sockets::bound_sockets()?;
            let short = crate::sockets::short_of(&bound, listeners, crate::corefile::DNS_PORT, sockets);
            if !short.is_empty() {
                return Err(short.join(", "));
            }
            Ok(Some(()))
        },
    )
}
