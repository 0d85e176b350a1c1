//! Host preparation that outlives a reboot: kernel settings in `/etc/sysctl.d/` and modules in
//! `/etc/modules-load.d/`. The machine cannot set these itself (nspawn's `/proc/sys` is read-only
//! inside it, but for `net`), and the kernel is shared.

use super::HEADER;

pub use crate::paths::{MODULES_FILE, SYSCTL_FILE};

/// Modules containerd (overlay snapshots) and the pod bridge (`br_netfilter`) need.
pub const MODULES: [&str; 2] = ["overlay", "br_netfilter"];

/// Kernel settings, in file order: forwarding for the pod network, bridged traffic through
/// netfilter, and the values kubelet insists on (it would try to write them from inside the
/// machine, where `/proc/sys/vm` and `/proc/sys/kernel` are read-only, and fail).
pub const SYSCTLS: [(&str, &str); 9] = [
    ("net.ipv4.ip_forward", "1"),
    ("net.bridge.bridge-nf-call-iptables", "1"),
    ("net.bridge.bridge-nf-call-ip6tables", "1"),
    ("vm.overcommit_memory", "1"),
    ("vm.panic_on_oom", "0"),
    ("kernel.panic", "10"),
    ("kernel.panic_on_oops", "1"),
    ("kernel.keys.root_maxkeys", "1000000"),
    ("kernel.keys.root_maxbytes", "25000000"),
];

/// `/etc/sysctl.d/90-unbounded-agent.conf`.
pub fn sysctl_conf() -> String {
    let mut out = String::from(HEADER);
    for (key, value) in SYSCTLS {
        out.push_str(&format!("{key} = {value}\n"));
    }
    out
}

/// `/etc/modules-load.d/unbounded-agent.conf`.
pub fn modules_conf() -> String {
    let mut out = String::from(HEADER);
    for m in MODULES {
        out.push_str(m);
        out.push('\n');
    }
    out
}

/// The `/proc/sys/...` file of a sysctl key.
pub fn proc_sys_path(key: &str) -> String {
    format!("/proc/sys/{}", key.replace('.', "/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forwarding_is_on_and_every_key_maps_to_proc_sys() {
        assert!(sysctl_conf().contains("\nnet.ipv4.ip_forward = 1\n"));
        assert_eq!(
            proc_sys_path("net.bridge.bridge-nf-call-iptables"),
            "/proc/sys/net/bridge/bridge-nf-call-iptables"
        );
    }
}
