//! What `unbounded-agent status` reports about this host: the install (active slot, stage,
//! config digest), an operation under way or interrupted, the last one that finished and the
//! last that failed since (its step and error), a repave
//! under way, and LocalDNS's health on both listeners (the supervisor's own probes: `/ready`
//! and a DNS query for the health name) and whether its supervisor serves the fallback Corefile
//! (degraded: its unit's status line says so). Problems are listed, so the command can exit
//! non-zero.

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use crate::corefile::{HEALTH_NAME, READY_PORT};
use crate::files::under;
use crate::install_state::{self, FailedOperation, FinishedOperation, InstallState, OperationRecord, Stage};
use crate::lifecycle::repave_state::{self, RepaveState};
use crate::names::Slot;
use crate::supervisor::probe;

/// How long each probe may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The whole report.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// `None`: the agent never installed a node here (or reset removed it).
    pub install: Option<Install>,
    /// `None` when there is no node or its applied config has LocalDNS off.
    pub local_dns: Option<LocalDnsHealth>,
    /// What is wrong, one line each; empty when the node is installed, idle and healthy.
    pub problems: Vec<String>,
}

/// The install state, as people read it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Install {
    pub slot: Slot,
    pub stage: Stage,
    pub config_sha256: String,
    /// An operation that entered a step and has not finished (under way, or interrupted: run
    /// the same command again to finish it).
    pub operation_under_way: Option<OperationRecord>,
    pub last_operation: Option<FinishedOperation>,
    /// The last operation that failed since one last finished: its step and error.
    pub last_failure: Option<FailedOperation>,
    pub repave_under_way: Option<RepaveState>,
}

/// LocalDNS on both listeners.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalDnsHealth {
    pub listeners: Vec<ListenerHealth>,
    /// The supervisor's status line when it says degraded (CoreDNS refused the Corefile and the
    /// fallback serves); `None` when it does not, or cannot be read.
    pub degraded: Option<String>,
}

/// One listener's probes: `None` when it passed, else why not.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListenerHealth {
    /// `node` or `cluster`.
    pub name: String,
    pub address: Ipv4Addr,
    pub ready_error: Option<String>,
    pub dns_error: Option<String>,
}

impl ListenerHealth {
    pub fn healthy(&self) -> bool {
        self.ready_error.is_none() && self.dns_error.is_none()
    }
}

/// Reads the records below `root` and probes the listeners of the applied config; `unit_status`
/// gives the status line of `localdns.service` in a slot's machine ([`localdns_status_line`] on
/// a real host).
pub fn gather(root: &Path, unit_status: &dyn Fn(Slot) -> Option<String>) -> NodeStatus {
    let mut problems = Vec::new();
    let state = match install_state::load(&under(root, Path::new(install_state::PATH))) {
        Ok(state) => state,
        Err(err) => {
            problems.push(err.to_string());
            None
        }
    };
    let repave = match repave_state::load(&under(root, Path::new(repave_state::PATH))) {
        Ok(repave) => repave,
        Err(err) => {
            problems.push(err.to_string());
            None
        }
    };
    let Some(state) = state else {
        if problems.is_empty() {
            problems.push("no node is installed here (no install state)".into());
        }
        return NodeStatus {
            install: None,
            local_dns: None,
            problems,
        };
    };
    problems.extend(install_problems(&state, repave.as_ref()));
    let local_dns = match listeners_of_applied_config(root, state.slot) {
        Ok(Some((node, cluster))) => {
            let mut health = probe_listeners(node, cluster);
            health.degraded = unit_status(state.slot).filter(|line| says_degraded(line));
            Some(health)
        }
        Ok(None) => None,
        Err(why) => {
            problems.push(why);
            None
        }
    };
    if let Some(line) = local_dns.as_ref().and_then(|l| l.degraded.as_ref()) {
        problems.push(format!("LocalDNS is {line}"));
    }
    for listener in local_dns.iter().flat_map(|l| &l.listeners) {
        for error in [&listener.ready_error, &listener.dns_error].into_iter().flatten() {
            problems.push(format!(
                "LocalDNS {} listener {}: {error}",
                listener.name, listener.address
            ));
        }
    }
    NodeStatus {
        install: Some(Install {
            slot: state.slot,
            stage: state.stage,
            config_sha256: state.config_sha256.clone(),
            operation_under_way: state.operation.clone(),
            last_operation: state.last_operation.clone(),
            last_failure: state.last_failure.clone(),
            repave_under_way: repave,
        }),
        local_dns,
        problems,
    }
}

/// What the records say is not finished.
pub fn install_problems(state: &InstallState, repave: Option<&RepaveState>) -> Vec<String> {
    let mut problems = Vec::new();
    if state.stage != Stage::Complete {
        problems.push(format!(
            "the install of {} stopped at stage {} (run `unbounded-agent start` again to finish it)",
            state.slot,
            state.stage.as_str()
        ));
    }
    if let Some(op) = &state.operation {
        problems.push(format!(
            "{} is under way or was interrupted at step {} (run `unbounded-agent {}` again to finish it)",
            op.kind, op.step, op.kind
        ));
    }
    if let Some(failed) = &state.last_failure {
        problems.push(format!(
            "{} failed at step {}: {}",
            failed.kind, failed.step, failed.error
        ));
    }
    if let Some(repave) = repave {
        problems.push(format!(
            "a repave {} → {} is under way or was interrupted in phase {} (run `unbounded-agent repave` again to finish it)",
            repave.from,
            repave.to,
            repave.phase.as_str()
        ));
    }
    problems
}

/// The node and cluster listener of the slot's applied config; `None` with LocalDNS off.
fn listeners_of_applied_config(root: &Path, slot: Slot) -> Result<Option<(Ipv4Addr, Ipv4Addr)>, String> {
    let (path, _) = crate::start::node::applied_paths(root, slot);
    let (config, _) = crate::start::load_config(&path).map_err(|e| format!("the applied config: {e}"))?;
    Ok(config
        .local_dns
        .map(|l| (l.node_listener.addr(), l.cluster_listener.addr())))
}

fn probe_listeners(node: Ipv4Addr, cluster: Ipv4Addr) -> LocalDnsHealth {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
    let listeners = [("node", node), ("cluster", cluster)]
        .into_iter()
        .map(|(name, address)| {
            let (ready, dns) = match &runtime {
                Ok(runtime) => runtime.block_on(async {
                    (
                        probe::ready(address, READY_PORT, PROBE_TIMEOUT).await,
                        probe::dns(address, HEALTH_NAME, PROBE_TIMEOUT).await,
                    )
                }),
                Err(e) => {
                    let why = format!("no runtime to probe with: {e}");
                    return ListenerHealth {
                        name: name.into(),
                        address,
                        ready_error: Some(why.clone()),
                        dns_error: Some(why),
                    };
                }
            };
            ListenerHealth {
                name: name.into(),
                address,
                ready_error: ready.err().map(|e| e.to_string()),
                dns_error: dns.err().map(|e| e.to_string()),
            }
        })
        .collect();
    LocalDnsHealth {
        listeners,
        degraded: None,
    }
}

/// Whether a status line of the supervisor says it is degraded.
fn says_degraded(line: &str) -> bool {
    line.starts_with(crate::supervisor::notify::DEGRADED_PREFIX)
}

/// The status line of `localdns.service` in `slot`'s machine (`systemctl --machine <slot> show
/// localdns.service -p StatusText`); `None` when it cannot be read (no machine running, no unit).
pub fn localdns_status_line(slot: Slot) -> Option<String> {
    let mut command = std::process::Command::new("systemctl");
    command.args([
        "--machine",
        slot.as_str(),
        "show",
        crate::supervisor::restart_bridge::SERVICE_UNIT,
        "--property=StatusText",
        "--value",
    ]);
    let out = crate::exec::run_stdout(&mut command).ok()?;
    Some(out.trim().to_owned()).filter(|line| !line.is_empty())
}

/// The report for people.
pub fn to_text(status: &NodeStatus) -> String {
    let mut out = String::new();
    match &status.install {
        None => out.push_str("install: none\n"),
        Some(install) => {
            out.push_str(&format!(
                "install: active slot {} (machine {0}), stage {}, config sha256 {}\n",
                install.slot,
                install.stage.as_str(),
                install.config_sha256
            ));
            match &install.last_operation {
                Some(last) => out.push_str(&format!(
                    "last operation: {} finished (unix time {}), node in {}\n",
                    last.kind, last.finished_at, last.slot
                )),
                None => out.push_str("last operation: none recorded\n"),
            }
            if let Some(failed) = &install.last_failure {
                out.push_str(&format!(
                    "last failure: {} failed at step {} (unix time {}): {}\n",
                    failed.kind, failed.step, failed.failed_at, failed.error
                ));
            }
            if let Some(op) = &install.operation_under_way {
                out.push_str(&format!(
                    "operation under way or interrupted: {} at step {}\n",
                    op.kind, op.step
                ));
            }
            if let Some(repave) = &install.repave_under_way {
                out.push_str(&format!(
                    "repave under way or interrupted: {} → {}, phase {}\n",
                    repave.from,
                    repave.to,
                    repave.phase.as_str()
                ));
            }
        }
    }
    match &status.local_dns {
        None if status.install.is_some() => out.push_str("LocalDNS: off\n"),
        None => {}
        Some(health) => {
            if let Some(line) = &health.degraded {
                out.push_str(&format!("LocalDNS: {line}\n"));
            }
            for listener in &health.listeners {
                let state = if listener.healthy() {
                    "serving"
                } else {
                    "NOT serving"
                };
                out.push_str(&format!(
                    "LocalDNS {} listener {}: {state}\n",
                    listener.name, listener.address
                ));
            }
        }
    }
    for problem in &status.problems {
        out.push_str(&format!("problem: {problem}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn installed(root: &Path, state: &InstallState) {
        let path = under(root, Path::new(install_state::PATH));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        install_state::save(&path, state).unwrap();
    }

    #[test]
    fn no_install_state_is_no_node_and_a_problem() {
        let root = tempfile::tempdir().unwrap();
        let status = gather(root.path(), &|_| None);
        assert!(status.install.is_none() && status.local_dns.is_none());
        assert_eq!(status.problems, ["no node is installed here (no install state)"]);
        assert!(to_text(&status).starts_with("install: none\n"));
    }

    #[test]
    fn an_interrupted_operation_and_an_unfinished_install_are_named_with_the_command_that_finishes_them() {
        let mut state = InstallState::new(Slot::Kube1, Stage::StartingNode, "abc");
        state.operation = Some(OperationRecord {
            kind: "reboot".into(),
            step: "stop-node".into(),
            config_sha256: "abc".into(),
        });
        let problems = install_problems(&state, None);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("stage starting-node") && problems[0].contains("unbounded-agent start"));
        assert!(problems[1].contains("reboot") && problems[1].contains("step stop-node"));
    }

    #[test]
    fn a_finished_install_without_its_applied_config_says_so_and_reports_the_last_operation() {
        let root = tempfile::tempdir().unwrap();
        let mut state = InstallState::new(Slot::Kube2, Stage::Complete, "abc");
        state.last_operation = Some(FinishedOperation {
            kind: "repave".into(),
            finished_at: 1_800_000_000,
            slot: Slot::Kube2,
        });
        installed(root.path(), &state);
        let status = gather(root.path(), &|_| None);
        let install = status.install.as_ref().unwrap();
        assert_eq!(install.last_operation.as_ref().unwrap().kind, "repave");
        assert_eq!(status.problems.len(), 1, "{:?}", status.problems);
        assert!(
            status.problems[0].starts_with("the applied config"),
            "{:?}",
            status.problems
        );
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(json["install"]["slot"], "kube2");
        assert_eq!(json["install"]["stage"], "complete");
        assert_eq!(json["install"]["lastOperation"]["kind"], "repave");
        assert!(to_text(&status).contains("last operation: repave finished"));
    }

    #[test]
    fn a_failed_operation_is_reported_with_its_step_and_error_beside_the_last_finished() {
        let root = tempfile::tempdir().unwrap();
        let mut state = InstallState::new(Slot::Kube1, Stage::Complete, "abc");
        state.last_operation = Some(FinishedOperation {
            kind: "start".into(),
            finished_at: 1_800_000_000,
            slot: Slot::Kube1,
        });
        state.last_failure = Some(FailedOperation {
            kind: "apply".into(),
            step: "reconfigure".into(),
            failed_at: 1_800_000_100,
            error: "CoreDNS: checksum mismatch".into(),
        });
        installed(root.path(), &state);
        let status = gather(root.path(), &|_| None);
        assert!(
            status
                .problems
                .contains(&"apply failed at step reconfigure: CoreDNS: checksum mismatch".to_string()),
            "{:?}",
            status.problems
        );
        let text = to_text(&status);
        assert!(
            text.starts_with("install: active slot kube1 (machine kube1), stage complete"),
            "{text}"
        );
        assert!(
            text.contains("last operation: start finished (unix time 1800000000), node in kube1\n"),
            "{text}"
        );
        assert!(
            text.contains("last failure: apply failed at step reconfigure (unix time 1800000100): CoreDNS: checksum mismatch\n"),
            "{text}"
        );
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(json["install"]["lastFailure"]["step"], "reconfigure");
        assert_eq!(
            json["install"]["lastFailure"]["error"],
            "CoreDNS: checksum mismatch"
        );
    }

    #[test]
    fn a_degraded_supervisor_is_reported_in_its_own_words() {
        let line = "degraded (serving the fallback Corefile: CoreDNS refused /etc/unbounded/localdns/Corefile \
                    (exit status: 1): plugin/cache: bad): CoreDNS healthy on 169.254.10.10 and 169.254.10.11";
        assert!(says_degraded(line));
        assert!(!says_degraded(
            "CoreDNS healthy on 169.254.10.10 and 169.254.10.11"
        ));
        let status = NodeStatus {
            install: None,
            local_dns: Some(LocalDnsHealth {
                listeners: Vec::new(),
                degraded: Some(line.into()),
            }),
            problems: Vec::new(),
        };
        assert!(
            to_text(&status).contains(&format!("LocalDNS: {line}\n")),
            "{}",
            to_text(&status)
        );
        assert_eq!(
            serde_json::to_value(&status).unwrap()["localDns"]["degraded"],
            line
        );
    }

    #[test]
    fn a_listener_that_does_not_answer_is_not_serving() {
        // 127.0.0.9 on loopback: nothing listens there, the probes fail fast.
        let health = probe_listeners(Ipv4Addr::new(127, 0, 0, 9), Ipv4Addr::new(127, 0, 0, 10));
        assert_eq!(health.listeners.len(), 2);
        assert!(health.listeners.iter().all(|l| !l.healthy()), "{health:?}");
        assert!(
            health.listeners[0]
                .ready_error
                .as_ref()
                .unwrap()
                .contains("127.0.0.9:")
        );
    }
}
