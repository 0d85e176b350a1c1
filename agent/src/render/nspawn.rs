//! The machine's nspawn settings on the host: `/etc/systemd/nspawn/<slot>.nspawn` and the
//! `systemd-nspawn@<slot>.service.d/override.conf` drop-in (docs/agent.md, "Where each file lands").

use super::HEADER;
use crate::names::Slot;
use crate::paths::NSPAWN_RESOLV_CONF;

pub use crate::paths::{bpffs_dir, nspawn_override as override_path, nspawn_settings as nspawn_path};

/// The `.nspawn` file: systemd as PID 1, every capability and the host's user namespace
/// (containerd and kubelet manage cgroups, mounts and namespaces), the extra system calls for
/// keyrings, bpf and perf, the host network shared (`VirtualEthernet=no`, so the LocalDNS link
/// lives on the host), `ResolvConf=off` (LocalDNS owns the machine's resolver), `/lib/modules`
/// read-only (kube-proxy and CNI plugins probe modules), `/dev/kmsg` (kubelet's OOM watcher) and a
/// private bpffs per machine.
pub fn nspawn_file(slot: Slot) -> String {
    let (section, resolv) = NSPAWN_RESOLV_CONF;
    debug_assert_eq!(section, "Exec");
    format!(
        "{HEADER}[Exec]
Boot=yes
Capability=all
PrivateUsers=no
SystemCallFilter=add_key keyctl bpf perf_event_open
{resolv}
LinkJournal=try-guest

[Network]
VirtualEthernet=no
Private=no

[Files]
BindReadOnly=/lib/modules
Bind=/dev/kmsg
Bind={bpffs}:/sys/fs/bpf
",
        bpffs = bpffs_dir(slot)
    )
}

/// The unit drop-in: a stale registration (systemd-machined restarted) is terminated before
/// start, and so is the unix-export mount point a machine killed on its way down leaves behind
/// (nspawn refuses to start while `/run/systemd/nspawn/unix-export/<slot>` exists); failures
/// restart after 10 s without ever reaching a start-limit dead state; a shutdown gets 5 minutes
/// (an emulated host stops a machine full of pods slowly, and a SIGKILL leaves that mount point);
/// the unified cgroup hierarchy, `/proc/sys/net` writable (kubelet and CNI set net sysctls),
/// `/dev/kmsg` allowed, and the private bpffs mounted before the machine starts.
pub fn override_conf(slot: Slot) -> String {
    let bpffs = bpffs_dir(slot);
    format!(
        "{HEADER}[Unit]
StartLimitIntervalSec=0

[Service]
Restart=on-failure
RestartSec=10s
TimeoutStopSec=300s
Environment=SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1
Environment=SYSTEMD_NSPAWN_API_VFS_WRITABLE=network
DeviceAllow=/dev/kmsg rw
ExecStartPre=-/usr/bin/machinectl terminate {slot}
ExecStartPre=-/bin/sh -c 'umount /run/systemd/nspawn/unix-export/{slot} 2>/dev/null; rmdir /run/systemd/nspawn/unix-export/{slot} 2>/dev/null; true'
ExecStartPre=/bin/mkdir -p {bpffs}
ExecStartPre=/bin/sh -c 'mountpoint -q {bpffs} || mount -t bpf bpf {bpffs}'
"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nspawn_file_shares_the_host_network_and_leaves_the_resolver_alone() {
        let text = nspawn_file(Slot::Kube2);
        for line in [
            "Boot=yes",
            "Capability=all",
            "PrivateUsers=no",
            "ResolvConf=off",
            "VirtualEthernet=no",
            "BindReadOnly=/lib/modules",
            "Bind=/run/unbounded/bpffs/kube2:/sys/fs/bpf",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
    }

    #[test]
    fn the_override_terminates_a_stale_machine_and_has_no_start_limit() {
        let text = override_conf(Slot::Kube1);
        assert!(
            text.contains("ExecStartPre=-/usr/bin/machinectl terminate kube1\n"),
            "{text}"
        );
        assert!(text.contains("StartLimitIntervalSec=0\n"), "{text}");
        assert!(
            text.contains("rmdir /run/systemd/nspawn/unix-export/kube1"),
            "a stale unix-export mount point would stop the machine from starting:\n{text}"
        );
        assert!(text.contains("Restart=on-failure\nRestartSec=10s\n"), "{text}");
    }
}
