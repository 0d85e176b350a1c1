//! Whether a lab's status ([`LabStatus`]) is healthy, for `harness lab status`'s exit code: what
//! is wrong, one line each (empty: healthy).
//!
//! Judged: the lab's owner is alive; the Kind cluster's engine answers and its node containers
//! run; each VM's QEMU runs and, when the lab has a cluster, its Node is registered and Ready;
//! a VM whose `localdns.service` is `active` answers `/ready` on both listeners, and one in any
//! other state than `inactive` is wrong. A node whose `localdns.service` is `inactive` (LocalDNS
//! off: the unit does not exist) or unknown is judged by its Node alone. Problems met while the
//! status was gathered count too.

use super::status::{LabStatus, VmStatus};

/// What is wrong with the lab, one line each.
pub fn problems(status: &LabStatus) -> Vec<String> {
    let mut found = Vec::new();
    match &status.owner {
        Some(owner) if !owner.alive => found.push(format!("the lab's owner {} is gone", owner.pid)),
        None => found.push("the lab has no owner".to_string()),
        Some(_) => {}
    }
    if let Some(kind) = &status.kind {
        if let Some(problem) = &kind.problem {
            found.push(format!("Kind cluster {}: {problem}", kind.cluster));
        }
        for node in kind.nodes.iter().filter(|n| n.state != "running") {
            found.push(format!("Kind node {} is {}", node.container, node.state));
        }
    }
    let has_cluster = status.kubeconfig.is_some();
    for vm in &status.vms {
        found.extend(
            vm_problems(vm, has_cluster)
                .into_iter()
                .map(|p| format!("VM {}: {p}", vm.name)),
        );
    }
    found
}

fn vm_problems(vm: &VmStatus, has_cluster: bool) -> Vec<String> {
    let mut found = vm.problems.clone();
    if vm.qemu_pid.is_none() {
        found.push("QEMU is not running".to_string());
    }
    if has_cluster {
        match &vm.node {
            Some(node) if node.registered && node.ready => {}
            Some(node) if node.registered => found.push(format!("Node not Ready ({})", node.conditions)),
            _ => found.push("no Node registered".to_string()),
        }
    }
    match vm.localdns.as_deref() {
        Some("active") => found.extend(
            vm.listeners
                .iter()
                .filter(|l| !l.ready)
                .map(|l| format!("LocalDNS listener {} not ready: {}", l.address, l.detail)),
        ),
        None | Some("inactive") => {}
        Some(other) => found.push(format!("localdns.service is {other}")),
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::status::{ListenerStatus, NodeStatus};

    fn listener(address: &str, ready: bool) -> ListenerStatus {
        ListenerStatus {
            address: address.into(),
            ready,
            detail: if ready { "200 OK" } else { "000" }.into(),
        }
    }

    fn vm(localdns: Option<&str>, listeners: Vec<ListenerStatus>, ready: bool) -> VmStatus {
        VmStatus {
            name: "localdns".into(),
            qemu_pid: Some(4300),
            console: "console.log".into(),
            node: Some(NodeStatus {
                registered: true,
                ready,
                conditions: format!("Ready={}", if ready { "True" } else { "False" }),
            }),
            slot: Some("kube1".into()),
            localdns: localdns.map(str::to_string),
            listeners,
            start_output: String::new(),
            problems: Vec::new(),
        }
    }

    /// The status tests' lab (owner 4242 alive, its Kind node running) with `vms`.
    fn lab(vms: Vec<VmStatus>) -> LabStatus {
        LabStatus {
            vms,
            ..crate::inspect::status::tests::a_status()
        }
    }

    fn both(ready: bool) -> Vec<ListenerStatus> {
        vec![listener("169.254.10.10", ready), listener("169.254.10.11", ready)]
    }

    #[test]
    fn a_ready_node_serving_localdns_and_a_localdns_off_node_are_healthy() {
        assert_eq!(
            problems(&lab(vec![vm(Some("active"), both(true), true)])),
            Vec::<String>::new()
        );
        assert_eq!(
            problems(&lab(vec![vm(Some("inactive"), both(false), true)])),
            Vec::<String>::new()
        );
        assert_eq!(problems(&lab(Vec::new())), Vec::<String>::new());
    }

    #[test]
    fn a_node_not_ready_a_listener_down_a_failed_unit_or_a_stopped_cluster_is_named() {
        let found = problems(&lab(vec![vm(
            Some("active"),
            vec![listener("169.254.10.10", true), listener("169.254.10.11", false)],
            false,
        )]));
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].starts_with("VM localdns: Node not Ready"), "{found:?}");
        assert!(
            found[1].contains("listener 169.254.10.11 not ready: 000"),
            "{found:?}"
        );
        let failed = problems(&lab(vec![vm(Some("failed"), both(false), true)]));
        assert_eq!(failed, ["VM localdns: localdns.service is failed"]);
        let mut stopped = lab(Vec::new());
        stopped.kind.as_mut().unwrap().nodes[0].state = "exited".into();
        stopped.owner.as_mut().unwrap().alive = false;
        assert_eq!(
            problems(&stopped),
            [
                "the lab's owner 4242 is gone",
                "Kind node lab-0-control-plane is exited"
            ]
        );
    }

    #[test]
    fn without_a_cluster_a_vm_is_not_asked_for_a_node() {
        let mut status = lab(vec![vm(None, Vec::new(), false)]);
        status.kubeconfig = None;
        status.kind = None;
        status.vms[0].node = None;
        assert_eq!(problems(&status), Vec::<String>::new());
        status.vms[0].qemu_pid = None;
        assert_eq!(problems(&status), ["VM localdns: QEMU is not running"]);
    }
}
