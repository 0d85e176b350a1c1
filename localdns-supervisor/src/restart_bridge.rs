//! Any restart of `localdns.service` — an operator's `systemctl restart localdns` as much as the
//! agent's planned ones — with something answering on the listeners throughout. The unit's
//! `ExecStop=` runs [`before_stop`]: only when the stop is the first half of a restart job, the
//! bridge is not running already (the agent's restart starts it itself) and something holds the
//! listeners, it starts `localdns-bridge.service`, waits until the bridge's CoreDNS holds each
//! listener beside the running one, and leaves [`MARKER`]. The unit's `ExecStartPost=` runs
//! [`after_start`]: with the marker there, it waits until the new CoreDNS holds the listeners beside
//! the bridge and stops the bridge. Both run as root (`+`) and never fail the unit (`-`); what
//! they did goes to the journal. A plain stop (LocalDNS turned off, reset, shutdown) and systemd's
//! own restart after a crash start no bridge.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use localdns::corefile::DNS_PORT;
use node_base::exec::{self, CommandFailed};
use node_base::sockets::{bound_sockets, held_on, short_of};

/// The supervisor's argument in `localdns.service`'s `ExecStop=`: bridge the restart this stop begins.
pub const BEFORE_STOP: &str = "bridge-before-stop";
/// The supervisor's argument in `localdns.service`'s `ExecStartPost=`: end this restart's bridge.
pub const AFTER_START: &str = "bridge-after-start";
/// The unit restarted.
pub const SERVICE_UNIT: &str = "localdns.service";
/// The unit that answers meanwhile (`render::units::bridge_service`).
pub const BRIDGE_UNIT: &str = "localdns-bridge.service";
/// Left by [`before_stop`] for [`after_start`]: this restart's bridge is theirs to stop.
pub const MARKER: &str = "/run/localdns-bridge.for-restart";
/// How long the bridge's (or the new CoreDNS's) sockets are waited for; within the unit's
/// `TimeoutStopSec=` and `TimeoutStartSec=`.
pub const BOUND_TIMEOUT: Duration = Duration::from_secs(40);
const BOUND_POLL: Duration = Duration::from_millis(200);

#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    #[error(transparent)]
    Command(#[from] CommandFailed),
    #[error("{0}")]
    Sockets(String),
    #[error(
        "{wanted} UDP and TCP sockets on port 53 of each of {listeners:?} not there within {timeout:?}: {last}"
    )]
    NotHeld {
        wanted: usize,
        listeners: Vec<Ipv4Addr>,
        timeout: Duration,
        last: String,
    },
    #[error("{action} {MARKER}: {source}")]
    Marker {
        action: &'static str,
        source: std::io::Error,
    },
}

/// A listener with the number of UDP and of TCP sockets bound to its port 53.
pub type Held = (Ipv4Addr, (usize, usize));

/// What [`before_stop`] does, from what it sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BeforeStop {
    /// A plain stop: nothing to bridge.
    NotARestart,
    /// The bridge runs already (the agent's restart): it stops it too.
    AlreadyBridged,
    /// Nothing holds this listener yet: nothing to keep answering.
    NothingHeld(Ipv4Addr),
    /// Start the bridge.
    Bridge,
}

/// The decision of [`before_stop`] from whether a restart job runs, whether the bridge does, and
/// what holds each listener.
pub fn decide_before_stop(
    restart_job: bool,
    bridge_active: bool,
    held: &[(Ipv4Addr, (usize, usize))],
) -> BeforeStop {
    if !restart_job {
        return BeforeStop::NotARestart;
    }
    if bridge_active {
        return BeforeStop::AlreadyBridged;
    }
    if let Some((ip, _)) = held.iter().find(|(_, (udp, tcp))| *udp == 0 || *tcp == 0) {
        return BeforeStop::NothingHeld(*ip);
    }
    BeforeStop::Bridge
}

/// Whether `systemctl list-jobs --no-legend` output lists a restart job of `unit` (a restart job
/// keeps its type while its stop half runs, then becomes a start job).
pub fn restart_job_in(list_jobs: &str, unit: &str) -> bool {
    list_jobs.lines().any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields.len() >= 3 && fields[1] == unit && fields[2] == "restart"
    })
}

fn systemctl(args: &[&str]) -> Result<std::process::Output, CommandFailed> {
    exec::run_unchecked(Command::new("systemctl").args(args))
}

fn is_active(unit: &str) -> Result<bool, CommandFailed> {
    Ok(systemctl(&["is-active", "--quiet", unit])?.status.success())
}

fn held_now(listeners: &[Ipv4Addr]) -> Result<Vec<Held>, BridgeError> {
    let bound = bound_sockets().map_err(BridgeError::Sockets)?;
    Ok(listeners
        .iter()
        .map(|ip| (*ip, held_on(&bound, *ip, DNS_PORT)))
        .collect())
}

/// Waits until at least `wanted` UDP and `wanted` TCP sockets are bound to port 53 of each listener.
pub fn wait_held(listeners: &[Ipv4Addr], wanted: usize, timeout: Duration) -> Result<(), BridgeError> {
    let started = Instant::now();
    loop {
        let bound = bound_sockets().map_err(BridgeError::Sockets)?;
        let short = short_of(&bound, listeners, DNS_PORT, wanted);
        if short.is_empty() {
            return Ok(());
        }
        if started.elapsed() >= timeout {
            return Err(BridgeError::NotHeld {
                wanted,
                listeners: listeners.to_vec(),
                timeout,
                last: short.join(", "),
            });
        }
        std::thread::sleep(BOUND_POLL);
    }
}

/// `ExecStop=`: starts the bridge for a restart (see the module); returns what it did.
pub fn before_stop(listeners: &[Ipv4Addr]) -> Result<String, BridgeError> {
    let jobs = systemctl(&["list-jobs", "--no-legend", "--no-pager", SERVICE_UNIT])?;
    let restart_job = restart_job_in(&String::from_utf8_lossy(&jobs.stdout), SERVICE_UNIT);
    let decision = decide_before_stop(restart_job, is_active(BRIDGE_UNIT)?, &held_now(listeners)?);
    match decision {
        BeforeStop::NotARestart => Ok("a stop, not a restart: no bridge".into()),
        BeforeStop::AlreadyBridged => Ok(format!("{BRIDGE_UNIT} runs already")),
        BeforeStop::NothingHeld(ip) => Ok(format!("nothing holds {ip}:53 yet: no bridge")),
        BeforeStop::Bridge => {
            // The marker first: a bridge whose start outlasts `TimeoutStopSec=` (systemd then
            // kills this command and the restart goes on) is still stopped by `after_start`.
            std::fs::write(MARKER, b"").map_err(|source| BridgeError::Marker {
                action: "writing",
                source,
            })?;
            exec::run(Command::new("systemctl").args(["start", BRIDGE_UNIT]))?;
            let started = Instant::now();
            wait_held(listeners, 2, BOUND_TIMEOUT)?;
            Ok(format!(
                "{BRIDGE_UNIT} holds the listeners beside CoreDNS after {:.1} s; restarting",
                started.elapsed().as_secs_f64()
            ))
        }
    }
}

/// `ExecStartPost=`: stops this restart's bridge once the new CoreDNS holds the listeners beside it;
/// returns what it did.
pub fn after_start(listeners: &[Ipv4Addr]) -> Result<String, BridgeError> {
    if !Path::new(MARKER).exists() {
        return Ok("no bridge of this unit's to stop".into());
    }
    // A bridge that never came up is not waited for; `stop` also cancels a start still queued.
    let held = if is_active(BRIDGE_UNIT)? {
        wait_held(listeners, 2, BOUND_TIMEOUT)
    } else {
        Ok(())
    };
    exec::run(Command::new("systemctl").args(["stop", BRIDGE_UNIT]))?;
    std::fs::remove_file(MARKER).map_err(|source| BridgeError::Marker {
        action: "removing",
        source,
    })?;
    held?;
    Ok(format!(
        "the new CoreDNS holds the listeners; stopped {BRIDGE_UNIT}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODE: Ipv4Addr = Ipv4Addr::new(169, 254, 10, 10);
    const CLUSTER: Ipv4Addr = Ipv4Addr::new(169, 254, 10, 11);

    #[test]
    fn only_a_restart_with_both_listeners_held_and_no_bridge_yet_starts_one() {
        let held = [(NODE, (1, 1)), (CLUSTER, (1, 1))];
        assert_eq!(decide_before_stop(true, false, &held), BeforeStop::Bridge);
        assert_eq!(decide_before_stop(false, false, &held), BeforeStop::NotARestart);
        assert_eq!(decide_before_stop(true, true, &held), BeforeStop::AlreadyBridged);
        let cluster_free = [(NODE, (1, 1)), (CLUSTER, (1, 0))];
        assert_eq!(
            decide_before_stop(true, false, &cluster_free),
            BeforeStop::NothingHeld(CLUSTER)
        );
        let node_free = [(NODE, (0, 1)), (CLUSTER, (1, 1))];
        assert_eq!(
            decide_before_stop(true, false, &node_free),
            BeforeStop::NothingHeld(NODE)
        );
    }

    #[test]
    fn a_restart_job_is_found_by_unit_and_type() {
        let restart = "4711 localdns.service restart running\n4712 kubelet.service restart waiting\n";
        assert!(restart_job_in(restart, "localdns.service"));
        assert!(!restart_job_in(
            "4711 localdns.service stop running\n",
            "localdns.service"
        ));
        assert!(!restart_job_in(
            "4712 localdns-bridge.service restart running\n",
            "localdns.service"
        ));
        assert!(!restart_job_in("", "localdns.service"));
    }

    #[test]
    fn waiting_for_sockets_names_what_is_short_when_it_gives_up() {
        let free = Ipv4Addr::new(127, 83, 0, 1);
        let err = wait_held(&[free], 1, Duration::ZERO).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("127.83.0.1:53 has 0 UDP and 0 TCP"), "{text}");
    }
}
