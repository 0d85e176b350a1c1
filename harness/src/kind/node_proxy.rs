//! The Kind cluster's kube-proxy on a joined lab VM: its health endpoint (`:10256/healthz`, 200
//! once its rules are synced) asked from the VM's host. A kube-proxy that has just started (a
//! node resumed from a checkpoint, a repave's new machine, a kubelet that recreated its pod) has
//! not yet written the ClusterIP rules the node's traffic to `10.96.0.10` takes; a Kind
//! checkpoint is saved only once it has, and cluster-DNS checks wait for it.

use std::time::Duration;

use crate::vm::Vm;
use crate::wait::{Attempt, WaitTimeout, retry, wait_until};

/// kube-proxy's health endpoint on the node (`healthzBindAddress`, kubeadm's default port).
pub const HEALTHZ: &str = "http://127.0.0.1:10256/healthz";

/// Waits until the VM's kube-proxy answers 200 on [`HEALTHZ`]; the error says what it answered
/// last.
pub fn wait_kube_proxy_synced(vm: &Vm, timeout: Duration) -> Result<(), WaitTimeout> {
    let command = format!("curl -s -o /dev/null -w '%{{http_code}}' --max-time 5 {HEALTHZ} || true");
    wait_until::<_, WaitTimeout>(
        vm.name(),
        timeout,
        "the node's kube-proxy synced (healthz 200)",
        || match vm.run(&command) {
            Ok(code) if code.trim() == "200" => Attempt::Ready(()),
            Ok(code) => retry(format!("{HEALTHZ} answered {:?}", code.trim())),
            Err(e) => retry(e),
        },
    )
}
