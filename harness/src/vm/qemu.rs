//! The QEMU command line of a lab VM, built from its spec and run directory (pure, unit tested).
//!
//! Three launches share one builder, so that a saved guest state and the VMs resumed from it
//! have the same devices in the same order: a cold boot ([`args`]), the one boot a saved state
//! is taken from ([`template_args`]) and a VM resumed from it ([`resume_args`]). The saved
//! profile always has a 9p device (the VM's share, or an empty directory) and a `vmgenid`
//! device (the guest kernel reseeds its random generator when a clone resumes).

use std::ffi::OsString;
use std::path::Path;

use super::accel::Accel;
use super::rundir::RunDir;
use super::spec::{Mac, Net, VmSpec};

/// The MAC of the saved guest's NIC: QEMU's default for a first NIC, which is also what a
/// cold-booted VM on user networking gets. A resumed VM gets its own over the guest agent.
pub const TEMPLATE_MAC: Mac = Mac([0x52, 0x54, 0x00, 0x12, 0x34, 0x56]);

/// The template's network backend: a hub port with nothing else on the hub. It keeps no
/// state in the migration stream (user networking would add a `slirp` section that a VM on a
/// tap could not load), and the guest's link is up, so its address gets configured.
const TEMPLATE_NETDEV: &str = "hubport,id=n0,hubid=0";

/// How the saved-state profile differs from a cold boot.
struct Saved<'a> {
    /// The 9p share's host directory (always present in this profile).
    share: &'a Path,
    /// The template's own network backend and MAC instead of the spec's.
    template_net: bool,
    /// `-incoming` URI of a resumed VM.
    incoming: Option<&'a str>,
}

/// The QEMU binary.
pub const QEMU: &str = "qemu-system-x86_64";

/// The kernel command line: root on the bare ext4 `/dev/vda`, console on ttyS0, the guest's
/// address for `lab-net.service`, then the spec's extra words.
pub fn kernel_append(spec: &VmSpec) -> String {
    let address = spec.net.address();
    let mut words = vec![
        "root=/dev/vda".to_string(),
        "rw".into(),
        "console=ttyS0".into(),
        format!("lab.ip={}", address.ip),
        format!("lab.gw={}", address.gateway),
        format!("lab.dns={}", address.dns),
        format!("lab.vm={}", spec.name),
    ];
    words.extend(spec.extra_append.iter().cloned());
    words.join(" ")
}

/// All arguments after the binary name of a cold boot (disk: the run directory's overlay).
pub fn args(spec: &VmSpec, run: &RunDir, accel: Accel) -> Vec<OsString> {
    build(spec, run, accel, run.overlay(), None)
}

/// The arguments of the boot a saved state is taken from: disk `disk` (the future middle
/// layer), share `share` (an empty directory; the guest unmounts it before the save).
pub fn template_args(spec: &VmSpec, run: &RunDir, accel: Accel, disk: &Path, share: &Path) -> Vec<OsString> {
    let saved = Saved {
        share,
        template_net: true,
        incoming: None,
    };
    build(spec, run, accel, disk, Some(&saved))
}

/// The arguments of a VM resumed from a saved state: its own overlay, network backend, MAC,
/// kernel command line (used from its first reboot on) and share, and `-incoming <incoming>`.
pub fn resume_args(spec: &VmSpec, run: &RunDir, accel: Accel, share: &Path, incoming: &str) -> Vec<OsString> {
    let saved = Saved {
        share,
        template_net: false,
        incoming: Some(incoming),
    };
    build(spec, run, accel, run.overlay(), Some(&saved))
}

/// The template's arguments with every path and name replaced by a fixed placeholder: what a
/// saved state's key hashes (machine, accelerator, CPU, memory, devices, kernel command line).
pub fn profile_args(spec: &VmSpec, accel: Accel) -> String {
    let mut canonical = spec.clone();
    canonical.name = "template".into();
    canonical.lab = "vmstate".into();
    canonical.net = Net::User;
    canonical.share = None;
    canonical.netns = None;
    canonical.image.disk = "/image/disk".into();
    canonical.image.kernel = "/image/vmlinuz".into();
    canonical.image.initrd = "/image/initrd.img".into();
    let run = RunDir::at(Path::new("/run"), Path::new("/state"), "vmstate", "template");
    template_args(&canonical, &run, accel, Path::new("/disk"), Path::new("/share"))
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

fn build(spec: &VmSpec, run: &RunDir, accel: Accel, disk: &Path, saved: Option<&Saved>) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    let mut push = |items: &[&str]| a.extend(items.iter().map(OsString::from));
    let path = |p: std::path::PathBuf| p.display().to_string();
    let name = format!("guest={},process=qemu-{}", spec.name, spec.name);
    push(&[
        "-name",
        &name,
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
    ]);
    push(&["-machine", "pc"]);
    push(&accel.qemu_args());
    push(&["-smp", &spec.cpus.to_string(), "-m", &spec.memory_mib.to_string()]);
    push(&["-pidfile", &path(run.pid_file())]);
    // Direct kernel boot.
    push(&["-kernel", &spec.image.kernel.display().to_string()]);
    push(&["-initrd", &spec.image.initrd.display().to_string()]);
    push(&["-append", &kernel_append(spec)]);
    // NIC at PCI slot 2: the guest names it ens2.
    let (netdev, mac) = match (&spec.net, saved) {
        (
            _,
            Some(Saved {
                template_net: true, ..
            }),
        ) => (TEMPLATE_NETDEV.to_string(), Some(TEMPLATE_MAC.to_string())),
        (Net::User, _) => ("user,id=n0".to_string(), None),
        (Net::Tap { ifname, mac, .. }, _) => (
            format!("tap,id=n0,ifname={ifname},script=no,downscript=no"),
            Some(mac.to_string()),
        ),
    };
    let nic = match mac {
        Some(mac) => format!("virtio-net-pci,netdev=n0,addr=0x2,mac={mac}"),
        None => "virtio-net-pci,netdev=n0,addr=0x2".to_string(),
    };
    push(&["-netdev", &netdev, "-device", &nic]);
    // Disk: the VM's overlay as virtio-blk (vda).
    let drive = format!(
        "file={},if=none,id=disk0,format=qcow2,cache=unsafe,discard=unmap",
        disk.display()
    );
    push(&["-drive", &drive, "-device", "virtio-blk-pci,drive=disk0"]);
    push(&["-object", "rng-random,id=rng0,filename=/dev/urandom"]);
    push(&["-device", "virtio-rng-pci,rng=rng0"]);
    // Serial console to a file (appended to: a resumed VM's log starts with the saved boot's).
    let console = format!("file,id=serial0,path={},append=on", path(run.console()));
    push(&["-chardev", &console, "-serial", "chardev:serial0"]);
    // QMP.
    let qmp = format!("socket,id=qmp0,path={},server=on,wait=off", path(run.qmp()));
    push(&["-chardev", &qmp, "-mon", "chardev=qmp0,mode=control"]);
    // virtio-serial: guest agent, readiness port, virtconsole hvc0.
    push(&["-device", "virtio-serial-pci,id=vser0"]);
    let qga = format!("socket,id=qga0,path={},server=on,wait=off", path(run.qga()));
    push(&["-chardev", &qga]);
    push(&[
        "-device",
        "virtserialport,bus=vser0.0,chardev=qga0,name=org.qemu.guest_agent.0",
    ]);
    let ready = format!("socket,id=ready0,path={},server=on,wait=off", path(run.ready()));
    push(&["-chardev", &ready]);
    push(&[
        "-device",
        "virtserialport,bus=vser0.0,chardev=ready0,name=org.unbounded.ready",
    ]);
    let data = format!("socket,id=data0,path={},server=on,wait=off", path(run.data()));
    push(&["-chardev", &data]);
    push(&[
        "-device",
        "virtserialport,bus=vser0.0,chardev=data0,name=org.unbounded.data",
    ]);
    let hvc0 = format!("socket,id=hvc0,path={},server=on,wait=off", path(run.hvc0()));
    push(&[
        "-chardev",
        &hvc0,
        "-device",
        "virtconsole,bus=vser0.0,chardev=hvc0",
    ]);
    let share = match saved {
        Some(saved) => Some(saved.share),
        None => spec.share.as_deref(),
    };
    if let Some(share) = share {
        let virtfs = format!(
            "local,path={},mount_tag=lab,security_model=none,readonly=on",
            share.display()
        );
        push(&["-virtfs", &virtfs]);
    }
    if let Some(saved) = saved {
        push(&["-device", "vmgenid"]);
        if let Some(incoming) = saved.incoming {
            push(&["-incoming", incoming]);
        }
    }
    a
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::vm::spec::{BootImage, GuestAddress, Mac};

    fn spec() -> VmSpec {
        VmSpec::new(
            "lab-2",
            "node1",
            BootImage {
                disk: "/c/disk.qcow2".into(),
                kernel: "/c/vmlinuz".into(),
                initrd: "/c/initrd.img".into(),
            },
        )
    }

    fn joined(spec: &VmSpec, accel: Accel) -> String {
        let run = RunDir::at(Path::new("/r"), Path::new("/s"), &spec.lab, &spec.name);
        args(spec, &run, accel)
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn user_networking_vm_boots_its_kernel_with_the_lab_channels() {
        let line = joined(&spec(), Accel::Tcg);
        for part in [
            "-accel tcg,thread=single,tb-size=256 -cpu max,-cx16",
            "-kernel /c/vmlinuz -initrd /c/initrd.img",
            "-append root=/dev/vda rw console=ttyS0 lab.ip=10.0.2.15/24 lab.gw=10.0.2.2 lab.dns=10.0.2.3",
            "file=/s/lab-2/node1.qcow2,if=none,id=disk0,format=qcow2",
            "-netdev user,id=n0 -device virtio-net-pci,netdev=n0,addr=0x2",
            "virtio-rng-pci",
            "file,id=serial0,path=/r/lab-2/vms/node1/console.log",
            "socket,id=qmp0,path=/r/lab-2/vms/node1/qmp.sock,server=on,wait=off -mon chardev=qmp0,mode=control",
            "chardev=qga0,name=org.qemu.guest_agent.0",
            "chardev=ready0,name=org.unbounded.ready",
            "chardev=data0,name=org.unbounded.data",
            "virtconsole,bus=vser0.0,chardev=hvc0",
            "-pidfile /r/lab-2/vms/node1/qemu.pid",
        ] {
            assert!(line.contains(part), "missing {part:?} in {line}");
        }
        assert!(!line.contains("-virtfs"), "{line}");
    }

    #[test]
    fn tap_vm_gets_its_tap_mac_address_and_share() {
        let mut spec = spec();
        let mac = Mac::derive("lab-2", "node1");
        spec.net = Net::Tap {
            ifname: "labtap2-0".into(),
            mac,
            address: GuestAddress {
                ip: "192.168.102.10/24".into(),
                gateway: "192.168.102.1".into(),
                dns: "192.168.102.1".into(),
            },
        };
        spec.share = Some("/srv/share".into());
        spec.extra_append = vec!["systemd.unit=rescue.target".into()];
        let line = joined(&spec, Accel::Kvm);
        assert!(line.contains("-accel kvm -cpu host"), "{line}");
        assert!(
            line.contains("tap,id=n0,ifname=labtap2-0,script=no,downscript=no"),
            "{line}"
        );
        assert!(line.contains(&format!("mac={mac}")), "{line}");
        assert!(
            line.contains("lab.ip=192.168.102.10/24 lab.gw=192.168.102.1 lab.dns=192.168.102.1"),
            "{line}"
        );
        assert!(line.contains("lab.vm=node1 systemd.unit=rescue.target"), "{line}");
        assert!(line.contains("-virtfs local,path=/srv/share,mount_tag=lab,security_model=none,readonly=on"));
    }

    /// The `-device` values with the per-VM `mac=` removed: what must match between a saved
    /// state and the VMs resumed from it.
    fn devices(args: &[OsString]) -> Vec<String> {
        let args: Vec<String> = args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        args.windows(2)
            .filter(|w| w[0] == "-device" || w[0] == "-virtfs")
            .map(|w| {
                let value = w[1]
                    .split(',')
                    .filter(|p| !p.starts_with("mac=") && !p.starts_with("path="));
                value.collect::<Vec<_>>().join(",")
            })
            .collect()
    }

    #[test]
    fn resumed_vms_have_the_devices_of_the_saved_state_in_the_same_order() {
        let run = RunDir::at(Path::new("/r"), Path::new("/s"), "lab-2", "node1");
        let template = template_args(
            &spec(),
            &run,
            Accel::Tcg,
            Path::new("/c/booted.qcow2"),
            Path::new("/e"),
        );
        let mut tap = spec();
        tap.net = Net::Tap {
            ifname: "labtap2-0".into(),
            mac: Mac::derive("lab-2", "node1"),
            address: GuestAddress {
                ip: "192.168.102.10/24".into(),
                gateway: "192.168.102.1".into(),
                dns: "192.168.102.1".into(),
            },
        };
        let resumed = resume_args(&tap, &run, Accel::Tcg, Path::new("/share"), "exec:cat /x");
        assert_eq!(devices(&template), devices(&resumed));
        let joined = |a: &[OsString]| {
            a.iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        };
        let (template, resumed) = (joined(&template), joined(&resumed));
        assert!(template.contains("-netdev hubport,id=n0,hubid=0"), "{template}");
        assert!(template.contains("mac=52:54:00:12:34:56"), "{template}");
        assert!(template.contains("-virtfs local,path=/e,") && template.contains("-device vmgenid"));
        assert!(!template.contains("-incoming"));
        assert!(resumed.contains("tap,id=n0,ifname=labtap2-0"), "{resumed}");
        assert!(
            resumed.contains(&format!("mac={}", Mac::derive("lab-2", "node1"))),
            "{resumed}"
        );
        assert!(
            resumed.contains("lab.ip=192.168.102.10/24"),
            "the reboot uses the VM's own address: {resumed}"
        );
        assert!(resumed.contains("-virtfs local,path=/share,") && resumed.ends_with("-incoming exec:cat /x"));
    }

    #[test]
    fn profile_ignores_names_paths_and_network_but_not_memory_cpus_or_accelerator() {
        let base = profile_args(&spec(), Accel::Tcg);
        let mut other = spec();
        other.name = "other".into();
        other.lab = "lab-9".into();
        other.image.kernel = "/elsewhere/vmlinuz".into();
        other.share = Some("/srv".into());
        other.net = Net::Tap {
            ifname: "labtap9-1".into(),
            mac: Mac::derive("lab-9", "other"),
            address: GuestAddress {
                ip: "192.168.109.11/24".into(),
                gateway: "192.168.109.1".into(),
                dns: "192.168.109.1".into(),
            },
        };
        assert_eq!(profile_args(&other, Accel::Tcg), base);
        other.memory_mib = 4096;
        assert_ne!(profile_args(&other, Accel::Tcg), base);
        let mut cpus = spec();
        cpus.cpus = 1;
        assert_ne!(profile_args(&cpus, Accel::Tcg), base);
        assert_ne!(profile_args(&spec(), Accel::Kvm), base);
    }
}
