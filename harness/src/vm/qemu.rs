//! The QEMU command line of a lab VM, built from its spec and run directory (pure, unit tested).

use std::ffi::OsString;

use super::accel::Accel;
use super::rundir::RunDir;
use super::spec::{Net, VmSpec};

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

/// All arguments after the binary name.
pub fn args(spec: &VmSpec, run: &RunDir, accel: Accel) -> Vec<OsString> {
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
    let (netdev, mac) = match &spec.net {
        Net::User => ("user,id=n0".to_string(), None),
        Net::Tap { ifname, mac, .. } => (
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
        run.overlay().display()
    );
    push(&["-drive", &drive, "-device", "virtio-blk-pci,drive=disk0"]);
    push(&["-object", "rng-random,id=rng0,filename=/dev/urandom"]);
    push(&["-device", "virtio-rng-pci,rng=rng0"]);
    // Serial console to a file.
    let console = format!("file,id=serial0,path={}", path(run.console()));
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
    if let Some(share) = &spec.share {
        let virtfs = format!(
            "local,path={},mount_tag=lab,security_model=none,readonly=on",
            share.display()
        );
        push(&["-virtfs", &virtfs]);
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
            "-accel tcg,thread=single,tb-size=256 -cpu max",
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
}
