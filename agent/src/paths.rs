//! Every on-disk path of the agent, in one list used by the agent, the harness and the
//! scenarios: machine paths are inside the machine (prefix them with `/var/lib/machines/<slot>`
//! on the host, [`in_machine`]), host paths are on the host (docs/agent.md, "Where each file
//! lands").

use crate::names::Slot;

// The agent's records and settings on the host.
/// Where the lab and the docs put the operator's agent config (`start --config`).
pub const OPERATOR_CONFIG: &str = "/etc/unbounded/agent/config.json";
/// The agent's own directory under `/etc`: applied configs, the repave record.
pub const AGENT_ETC_DIR: &str = "/etc/unbounded/agent";
/// The install state (schema 2): active slot, stage, manifest, operation.
pub const INSTALL_STATE: &str = "/var/lib/unbounded/agent/install-state.json";
/// The repave record, present while a repave runs.
pub const REPAVE_STATE: &str = "/etc/unbounded/agent/repave-state.json";
/// The host-wide lock every acting agent process holds.
pub const LOCK: &str = "/run/unbounded-agent.lock";
/// Container image archives imported into the machine's containerd.
pub const IMAGES_DIR: &str = "/var/lib/unbounded/images";
/// Kernel settings and modules the agent sets on the host.
pub const SYSCTL_FILE: &str = "/etc/sysctl.d/90-unbounded-agent.conf";
pub const MODULES_FILE: &str = "/etc/modules-load.d/unbounded-agent.conf";
/// The agent daemon's host unit, its enablement link, and its credentials' directory.
pub const DAEMON_UNIT_NAME: &str = "unbounded-agent-daemon.service";
pub const DAEMON_UNIT: &str = "/etc/systemd/system/unbounded-agent-daemon.service";
pub const DAEMON_UNIT_WANTS_LINK: &str =
    "/etc/systemd/system/multi-user.target.wants/unbounded-agent-daemon.service";
pub const DAEMON_DIR: &str = "/etc/unbounded/agent/daemon";
/// The daemon's kubeconfig (its token read from [`DAEMON_TOKEN`]) and its token, which it renews.
pub const DAEMON_KUBECONFIG: &str = "/etc/unbounded/agent/daemon/kubeconfig";
pub const DAEMON_TOKEN: &str = "/etc/unbounded/agent/daemon/token";
/// The config the daemon hands to `apply` or `repave` when its Machine asks for a change.
pub const DESIRED_CONFIG: &str = "/etc/unbounded/agent/desired-config.json";
/// Where machine rootfs live (`/var/lib/machines/<slot>`).
pub const MACHINES_DIR: &str = "/var/lib/machines";

/// `/var/lib/machines/<slot>`.
pub fn rootfs(slot: Slot) -> String {
    format!("{MACHINES_DIR}/{slot}")
}

impl Slot {
    /// The machine's root directory on the host, `/var/lib/machines/<slot>`.
    pub fn rootfs(self) -> std::path::PathBuf {
        rootfs(self).into()
    }
}

/// A machine path as seen from the host: `/var/lib/machines/<slot>` + `path`.
pub fn in_machine(slot: Slot, path: &str) -> String {
    format!("{}{path}", rootfs(slot))
}

/// `/etc/systemd/nspawn/<slot>.nspawn`.
pub fn nspawn_settings(slot: Slot) -> String {
    format!("/etc/systemd/nspawn/{slot}.nspawn")
}

/// `/etc/systemd/system/systemd-nspawn@<slot>.service.d/override.conf`.
pub fn nspawn_override(slot: Slot) -> String {
    format!("/etc/systemd/system/systemd-nspawn@{slot}.service.d/override.conf")
}

/// `/etc/systemd/system/machines.target.wants/systemd-nspawn@<slot>.service` (`machinectl enable`).
pub fn machine_enablement_link(slot: Slot) -> String {
    format!("/etc/systemd/system/machines.target.wants/systemd-nspawn@{slot}.service")
}

/// The host directory holding the machine's private bpffs, bound to its `/sys/fs/bpf`.
pub fn bpffs_dir(slot: Slot) -> String {
    format!("/run/unbounded/bpffs/{slot}")
}

/// Directories `reset` removes when they are left empty, deepest first.
pub const EMPTY_DIRS_AFTER_RESET: [&str; 9] = [
    "/etc/systemd/system/machines.target.wants",
    LOCALDNS_DIR,
    AGENT_ETC_DIR,
    "/etc/unbounded",
    "/var/lib/unbounded/agent",
    "/var/lib/unbounded",
    "/etc/systemd/nspawn",
    "/run/unbounded/bpffs",
    "/run/unbounded",
];

// Inside the machine.
pub const LOCALDNS_DIR: &str = "/etc/unbounded/localdns";
pub const COREFILE: &str = "/etc/unbounded/localdns/Corefile";
/// The Corefile the supervisor serves when CoreDNS refuses [`COREFILE`].
pub const FALLBACK_COREFILE: &str = "/etc/unbounded/localdns/Corefile.fallback";
pub const LOCALDNS_RESOLV_CONF: &str = "/etc/unbounded/localdns/resolv.conf";
pub const NODE_UPSTREAMS: &str = "/etc/unbounded/localdns/node-upstreams";
pub const ENVIRONMENT: &str = "/etc/unbounded/localdns/environment";
pub const MACHINE_RESOLV_CONF: &str = "/etc/resolv.conf";
pub const COREDNS_BINARY: &str = "/usr/local/bin/coredns";
/// What was checked when CoreDNS was installed (`crate::artifact::coredns_record`).
pub const COREDNS_INSTALL_RECORD: &str = "/var/lib/unbounded/coredns-install.json";
pub const SUPERVISOR_BINARY: &str = "/usr/local/libexec/unbounded-localdns-supervisor";
pub const LOCALDNS_SERVICE: &str = "/etc/systemd/system/localdns.service";
pub const LOCALDNS_SLICE: &str = "/etc/systemd/system/localdns.slice";
pub const LOCALDNS_BRIDGE_SERVICE: &str = "/etc/systemd/system/localdns-bridge.service";
pub const LOCALDNS_SPARE_SERVICE: &str = "/etc/systemd/system/localdns-spare.service";
pub const LOCALDNS_SERVICE_WANTS_LINK: &str = "/etc/systemd/system/multi-user.target.wants/localdns.service";
pub const RESOLVED_MASK_LINK: &str = "/etc/systemd/system/systemd-resolved.service";
pub const CONTAINERD_DROP_IN: &str = "/etc/systemd/system/containerd.service.d/05-localdns.conf";
pub const KUBELET_DROP_IN: &str = "/etc/systemd/system/kubelet.service.d/05-localdns.conf";
pub const KUBELET_CONFIG: &str = "/var/lib/kubelet/config.yaml";

// On the host.
/// The host's LocalDNS directory (the nft script); the same path as the machine's.
pub const HOST_LOCALDNS_DIR: &str = LOCALDNS_DIR;
pub const NETWORK_UNIT_NAME: &str = "unbounded-localdns-network.service";
pub const NETWORK_UNIT: &str = "/etc/systemd/system/unbounded-localdns-network.service";
pub const NETWORK_UNIT_WANTS_LINK: &str =
    "/etc/systemd/system/multi-user.target.wants/unbounded-localdns-network.service";
pub const NFT_SCRIPT: &str = "/etc/unbounded/localdns/localdns.nft";
/// Watches the host's resolver files and runs [`UPSTREAMS_SERVICE_NAME`] when they change.
pub const UPSTREAMS_PATH_UNIT_NAME: &str = "unbounded-localdns-upstreams.path";
pub const UPSTREAMS_PATH_UNIT: &str = "/etc/systemd/system/unbounded-localdns-upstreams.path";
pub const UPSTREAMS_PATH_WANTS_LINK: &str =
    "/etc/systemd/system/paths.target.wants/unbounded-localdns-upstreams.path";
/// `unbounded-agent localdns upstreams refresh --reload`, as a oneshot unit.
pub const UPSTREAMS_SERVICE_NAME: &str = "unbounded-localdns-upstreams.service";
pub const UPSTREAMS_SERVICE: &str = "/etc/systemd/system/unbounded-localdns-upstreams.service";

/// `/etc/systemd/system/systemd-nspawn@<slot>.service.d/10-localdns.conf`.
pub fn nspawn_drop_in(slot: Slot) -> String {
    format!("/etc/systemd/system/systemd-nspawn@{slot}.service.d/10-localdns.conf")
}

/// `/etc/unbounded/agent/<slot>-applied-config.json`, the config the network unit applies.
pub fn applied_config(slot: Slot) -> String {
    format!("/etc/unbounded/agent/{slot}-applied-config.json")
}

/// The `.nspawn` setting LocalDNS needs (section, line): with a shared host
/// network nspawn's default `ResolvConf=auto` would overwrite the machine's
/// resolver at every start. `.nspawn` files have no drop-ins, so whoever
/// writes `/etc/systemd/nspawn/<slot>.nspawn` includes this line.
pub const NSPAWN_RESOLV_CONF: (&str, &str) = ("Exec", "ResolvConf=off");
