//! Stage `starting-node`, in docs/design.md §9 order: the applied config (the network unit reads it) →
//! LocalDNS host network → the machine (enabled, started, answering) → both LocalDNS listeners
//! `/ready` → containerd → image import → kubelet, active. Every step leaves what is already
//! so alone (a running unit is not restarted).

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::StartError;
use super::rootfs::ImageArchive;
use crate::corefile::READY_PORT;
use crate::exec;
use crate::hostnet::{self, NetworkSpec};
use crate::machine::MachineRunner;
use crate::machine::machinectl::{self, MachineError, poll};
use crate::progress::Progress;
use crate::validate::Config;

/// LocalDNS `/ready` polling (docs/design.md §9): every second, up to 60 s.
pub const LOCALDNS_READY_TIMEOUT: Duration = Duration::from_secs(60);
pub const LOCALDNS_READY_POLL: Duration = Duration::from_secs(1);
/// kubelet active polling (`WaitForKubelet`): every 2 s, up to 60 s.
pub const KUBELET_TIMEOUT: Duration = Duration::from_secs(60);
pub const KUBELET_POLL: Duration = Duration::from_secs(2);
/// containerd active polling.
pub const CONTAINERD_TIMEOUT: Duration = Duration::from_secs(60);

/// The waits of this stage: the deadlines of docs/design.md §9 times `scale` (an emulated host, e.g. QEMU
/// without KVM, boots the machine several times slower; `--timeout-scale`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waits {
    pub scale: u32,
}

/// The scale used on an emulated CPU when none is given.
pub const EMULATED_SCALE: u32 = 10;

impl Waits {
    /// `scale` when given; else [`EMULATED_SCALE`] when `systemd-detect-virt --vm` says `qemu`
    /// (QEMU without KVM: software emulation, where a machine boots in about a minute), else 1.
    pub fn given_or_detected(scale: Option<u32>) -> Waits {
        let scale = scale.unwrap_or_else(|| {
            let out = exec::run_unchecked(Command::new("systemd-detect-virt").arg("--vm"));
            match out {
                Ok(o) if String::from_utf8_lossy(&o.stdout).trim() == "qemu" => EMULATED_SCALE,
                _ => 1,
            }
        });
        Waits { scale }
    }

    fn scaled(self, d: Duration) -> Duration {
        d * self.scale.max(1)
    }
    pub fn machine(self) -> Duration {
        self.scaled(machinectl::READY_TIMEOUT)
    }
    pub fn localdns(self) -> Duration {
        self.scaled(LOCALDNS_READY_TIMEOUT)
    }
    pub fn containerd(self) -> Duration {
        self.scaled(CONTAINERD_TIMEOUT)
    }
    pub fn kubelet(self) -> Duration {
        self.scaled(KUBELET_TIMEOUT)
    }
}

/// `systemctl daemon-reload` on the host.
pub fn daemon_reload() -> Result<(), StartError> {
    exec::run(Command::new("systemctl").arg("daemon-reload"))?;
    Ok(())
}

/// The LocalDNS host network now (link and table, in-process), so the machine finds it; its
/// unit (rendered and enabled with the other files) recreates it at boot.
pub fn host_network(config: &Config, p: &dyn Progress) -> Result<(), StartError> {
    let Some(l) = &config.local_dns else {
        return Ok(());
    };
    let report = hostnet::apply(&NetworkSpec::from_config(l), &hostnet::nft_script(config, l))?;
    for line in report.to_string().lines() {
        p.line(line);
    }
    // From now on a change of the host's resolvers reaches CoreDNS (`localdns upstreams refresh`).
    // Left alone when running; a host without systemd (a test root) or without the unit file (an
    // install by an agent before it) goes on without it, saying so.
    if std::path::Path::new("/run/systemd/system").is_dir() {
        match crate::exec::run(Command::new("systemctl").args(["start", crate::paths::UPSTREAMS_PATH_UNIT_NAME])) {
            Ok(_) => {}
            Err(err) => p.line(&format!(
                "warning: {} not started ({err}); a change of the host's resolvers is taken at the next reboot or apply",
                crate::paths::UPSTREAMS_PATH_UNIT_NAME
            )),
        }
    }
    Ok(())
}

/// Enables and starts the machine (left alone when running) and waits until it runs commands.
pub fn machine(runner: &MachineRunner, waits: Waits, p: &dyn Progress) -> Result<(), StartError> {
    let m = runner.machine();
    machinectl::enable(m)?;
    if machinectl::start(m)? {
        p.line(&format!("started machine {m}"));
    }
    machinectl::wait_until_answering(runner, waits.machine())?;
    Ok(())
}

/// Waits until both listeners answer `GET /ready` with `OK`.
pub fn localdns_ready(config: &Config, waits: Waits, p: &dyn Progress) -> Result<(), StartError> {
    let Some(l) = &config.local_dns else {
        return Ok(());
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| StartError::Io {
            action: "start a runtime for",
            path: "the LocalDNS readiness probe".into(),
            source,
        })?;
    for ip in [l.node_listener.addr(), l.cluster_listener.addr()] {
        wait_ready(&runtime, ip, waits.localdns())?;
        p.line(&format!("LocalDNS listener {ip} is ready"));
    }
    Ok(())
}

fn wait_ready(
    runtime: &tokio::runtime::Runtime,
    ip: Ipv4Addr,
    timeout: Duration,
) -> Result<(), MachineError> {
    poll(
        &format!("LocalDNS GET http://{ip}:{READY_PORT}/ready answering OK"),
        timeout,
        LOCALDNS_READY_POLL,
        || {
            runtime
                .block_on(crate::supervisor::probe::ready(
                    ip,
                    READY_PORT,
                    Duration::from_secs(2),
                ))
                .map(Some)
                .map_err(|e| e.to_string())
        },
    )
}

/// Starts containerd in the machine (a no-op when active) and waits until it is active.
pub fn containerd(runner: &MachineRunner, waits: Waits) -> Result<(), StartError> {
    runner.run(&["systemctl", "start", "containerd.service"])?;
    machinectl::wait_unit_active(
        runner,
        "containerd.service",
        waits.containerd(),
        Duration::from_secs(1),
    )?;
    Ok(())
}

/// The image refs containerd's `k8s.io` namespace holds.
pub fn listed_images(runner: &MachineRunner) -> Result<Vec<String>, StartError> {
    let out = runner.run_stdout(&["ctr", "-n", "k8s.io", "images", "ls", "-q"])?;
    Ok(out
        .lines()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect())
}

/// Imports every archive whose ref containerd does not list yet, then checks (one listing, each
/// `ctr` start costs about a second under emulation) that it lists them all.
pub fn import_images(
    runner: &MachineRunner,
    images: &[ImageArchive],
    p: &dyn Progress,
) -> Result<(), StartError> {
    let listed = listed_images(runner)?;
    let missing: Vec<&ImageArchive> = images
        .iter()
        .filter(|image| !listed.contains(&image.reference))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    for image in &missing {
        runner.run(&["ctr", "-n", "k8s.io", "images", "import", &image.local_path])?;
    }
    let listed = listed_images(runner)?;
    for image in missing {
        if !listed.contains(&image.reference) {
            return Err(StartError::ImageNotImported {
                reference: image.reference.clone(),
                archive: image.local_path.clone(),
            });
        }
        p.line(&format!("imported {} from {}", image.reference, image.local_path));
    }
    Ok(())
}

/// Enables and starts kubelet in the machine (a no-op when active); waits until it is active.
pub fn kubelet(runner: &MachineRunner, waits: Waits) -> Result<(), StartError> {
    runner.run(&["systemctl", "enable", "kubelet.service"])?;
    runner.run(&["systemctl", "start", "kubelet.service"])?;
    machinectl::wait_unit_active(runner, "kubelet.service", waits.kubelet(), KUBELET_POLL)?;
    Ok(())
}

/// The applied config and its sidecar paths for a slot, below `root`.
pub fn applied_paths(root: &Path, slot: crate::names::Slot) -> (std::path::PathBuf, std::path::PathBuf) {
    let json = crate::files::under(root, Path::new(&crate::paths::applied_config(slot)));
    let mut sidecar = json.clone().into_os_string();
    sidecar.push(".sha256");
    (json, sidecar.into())
}
