//! systemd units inside the machine: `localdns.service`, `localdns-bridge.service`,
//! `localdns-spare.service`, `localdns.slice` and the containerd/kubelet drop-ins that order them after LocalDNS.

use super::HEADER;
use super::paths::{ENVIRONMENT, SUPERVISOR_BINARY};
use crate::goal::LocalDnsGoal;
use crate::supervisor::restart_bridge::{AFTER_START, BEFORE_STOP};
use crate::supervisor::spare::{self, UNIT as SPARE_UNIT};

/// How both LocalDNS services start and stop, and where and as whom they run (a dynamic user).
const LIFETIME: &str = "TimeoutStartSec=90
TimeoutStopSec=60
KillMode=mixed
OOMPolicy=continue
Slice=localdns.slice
DynamicUser=yes
";

/// What both LocalDNS services run under: unprivileged but for binding port 53, sandboxed.
const SANDBOX: &str = "AmbientCapabilities=CAP_NET_BIND_SERVICE
CapabilityBoundingSet=CAP_NET_BIND_SERVICE
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectControlGroups=yes
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX AF_NETLINK
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
MemoryDenyWriteExecute=yes
SystemCallArchitectures=native
LimitNOFILE=1048576
";

/// `localdns.service`: the supervisor (which runs CoreDNS) as a notify service
/// with a watchdog, unprivileged but for binding port 53, in `localdns.slice`;
/// `RuntimeDirectory=localdns` holds the warm standby CoreDNS's Corefile.
/// `OOMPolicy=continue`: a CoreDNS OOM-killed at the slice's `MemoryMax` is the supervisor's to
/// replace (the standby takes over), not a reason for systemd to stop the whole unit.
/// `StartLimitIntervalSec=0`: a stuck start never wedges the unit.
/// `ExecStop=` and `ExecStartPost=` bridge any restart of the unit with `localdns-bridge.service`
/// (`supervisor::restart_bridge`): as root (`+`), never failing the unit (`-`).
/// `Wants=localdns-spare.service`: every start of the unit starts the spare too ([`spare_service`]).
/// `Type=notify-reload`: `systemctl reload` sends the supervisor SIGHUP and waits until it says
/// the new CoreDNS took over or was refused (`supervisor::reload`), with no restart of the unit or
/// of what requires it (systemd 253 or newer in the machine).
pub fn service() -> String {
    format!(
        "{HEADER}[Unit]
Description=LocalDNS: CoreDNS cache for the node and its pods
Before=containerd.service kubelet.service
Wants={SPARE_UNIT}
StartLimitIntervalSec=0

[Service]
Type=notify-reload
NotifyAccess=all
EnvironmentFile={ENVIRONMENT}
ExecStart={SUPERVISOR_BINARY}
ExecStartPost=-+{SUPERVISOR_BINARY} {AFTER_START}
ExecStop=-+{SUPERVISOR_BINARY} {BEFORE_STOP}
WatchdogSec=60
Restart=on-failure
RestartSec=2
{LIFETIME}RuntimeDirectory=localdns
RuntimeDirectoryMode=0700
{SANDBOX}
[Install]
WantedBy=multi-user.target
"
    )
}

/// `localdns-bridge.service`: the same supervisor, environment and Corefile as
/// `localdns.service`, without a standby or a watchdog, started by the agent only for the length
/// of a planned restart of `localdns.service` (`start::localdns_restart`). Its CoreDNS binds the
/// listeners beside the running one: CoreDNS sets `SO_REUSEPORT`, and the kernel lets two sockets
/// share a port only when they belong to the same user, hence `User=localdns` — the dynamic user
/// of `localdns.service` (named after it), which systemd shares between units that name it. Not
/// enabled; nothing else starts it.
pub fn bridge_service() -> String {
    format!(
        "{HEADER}[Unit]
Description=LocalDNS bridge: answers on the listeners while localdns.service restarts
StartLimitIntervalSec=0

[Service]
Type=notify
NotifyAccess=all
EnvironmentFile={ENVIRONMENT}
Environment=LOCALDNS_STANDBY=0
ExecStart={SUPERVISOR_BINARY}
{LIFETIME}User=localdns
{SANDBOX}"
    )
}

/// The supervisor's runtime directory (`localdns.service`'s `RuntimeDirectory=localdns`), where
/// the spare finds its socket.
pub const SUPERVISOR_RUNTIME_DIR: &str = "/run/localdns";

/// `localdns-spare.service`: the supervisor as the spare (`supervisor::spare`), a warm standby
/// CoreDNS that answers on the listeners when `localdns.service`'s supervisor dies, until that
/// unit is back. Its own unit, so that `KillMode=mixed` of `localdns.service` does not take it
/// along; the same dynamic user (`User=localdns`), so that its CoreDNS may bind the listeners
/// beside that unit's and reach its socket; in `localdns.slice`, within the same limits. Started
/// by `localdns.service`'s `Wants=` and ordered after it, so it starts once CoreDNS serves; it
/// stands by while the supervisor is stopped on purpose, and exits when it stays away (180 s).
/// Not enabled.
pub fn spare_service() -> String {
    format!(
        "{HEADER}[Unit]
Description=LocalDNS spare: answers on the listeners when the supervisor of localdns.service dies
After=localdns.service
StartLimitIntervalSec=0

[Service]
Type=notify
EnvironmentFile={ENVIRONMENT}
ExecStart={SUPERVISOR_BINARY} {} {SUPERVISOR_RUNTIME_DIR}
Restart=on-failure
RestartSec=2
{LIFETIME}User=localdns
RuntimeDirectory=localdns-spare
RuntimeDirectoryMode=0700
{SANDBOX}",
        spare::ARG
    )
}

/// `localdns.slice`: `CPUQuota` is millicores/10 with a `%` (2000 → `200%`,
/// 2008 → `200.8%`), `MemoryMax` in MB.
pub fn slice(g: &LocalDnsGoal) -> String {
    format!(
        "{HEADER}[Unit]
Description=LocalDNS resource limits
Before=slices.target

[Slice]
CPUQuota={}
MemoryMax={}M
",
        cpu_quota(g.cpu_limit_millicores),
        g.memory_limit_mb
    )
}

/// Millicores as a systemd CPU percentage: 2000 → `200%`, 2008 → `200.8%`, 5 → `0.5%`.
pub fn cpu_quota(millicores: u32) -> String {
    let (whole, tenth) = (millicores / 10, millicores % 10);
    if tenth == 0 {
        format!("{whole}%")
    } else {
        format!("{whole}.{tenth}%")
    }
}

/// `containerd.service.d/05-localdns.conf` and `kubelet.service.d/05-localdns.conf`.
pub fn requires_localdns_drop_in() -> String {
    format!("{HEADER}[Unit]\nRequires=localdns.service\nAfter=localdns.service\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case(2000, "200%")]
    #[case(2008, "200.8%")]
    #[case(1, "0.1%")]
    #[case(10, "1%")]
    #[case(250, "25%")]
    fn cpu_quota_is_millicores_over_ten_with_a_percent_sign(#[case] millicores: u32, #[case] want: &str) {
        assert_eq!(cpu_quota(millicores), want);
    }
}
