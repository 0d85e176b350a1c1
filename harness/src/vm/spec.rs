//! What a VM is booted from and with: [`VmSpec`], its image, its network and its MAC address.

use std::fmt;
use std::path::PathBuf;

use sha2::{Digest, Sha256};

use super::accel::Accel;

/// The files a VM boots from: a read-only base disk (a bare ext4 filesystem: `root=/dev/vda`)
/// used as the backing file of the VM's own overlay, and a kernel and initrd for direct boot.
/// vCPUs of a lab VM unless its spec says otherwise.
pub const DEFAULT_CPUS: u32 = 2;

#[derive(Clone, Debug)]
pub struct BootImage {
    pub disk: PathBuf,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
}

/// A MAC address (`52:54:00:..` for derived ones, QEMU's locally administered prefix).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mac(pub [u8; 6]);

impl Mac {
    /// A stable MAC for VM `vm` of lab `lab`: `52:54:00` and three bytes of sha256("lab/vm").
    pub fn derive(lab: &str, vm: &str) -> Mac {
        let hash = Sha256::digest(format!("{lab}/{vm}").as_bytes());
        Mac([0x52, 0x54, 0x00, hash[0], hash[1], hash[2]])
    }
}

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

/// The guest's address, gateway and resolver, passed as `lab.ip= lab.gw= lab.dns=` on the kernel
/// command line (the image's `lab-net.service` turns them into a networkd file and resolv.conf).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestAddress {
    /// `<ip>/<prefix>`, e.g. `192.168.101.10/24`.
    pub ip: String,
    pub gateway: String,
    pub dns: String,
}

/// How the VM's one NIC (`virtio-net-pci` at PCI slot 2, so the guest names it `ens2`) is attached.
#[derive(Clone, Debug)]
pub enum Net {
    /// QEMU user-mode networking (no lab needed): the guest is 10.0.2.15/24, gateway 10.0.2.2,
    /// resolver 10.0.2.3, and reaches nothing but the host through NAT.
    User,
    /// A tap device (created and bridged by the lab) in the namespace QEMU runs in.
    Tap {
        /// e.g. `labtap3-0`.
        ifname: String,
        /// Usually [`Mac::derive`] of the lab and VM names.
        mac: Mac,
        address: GuestAddress,
    },
}

impl Net {
    /// The guest address the kernel command line carries.
    pub fn address(&self) -> GuestAddress {
        match self {
            Net::User => GuestAddress {
                ip: "10.0.2.15/24".into(),
                gateway: "10.0.2.2".into(),
                dns: "10.0.2.3".into(),
            },
            Net::Tap { address, .. } => address.clone(),
        }
    }
}

/// How a VM starts: resumed from the image's saved guest state (the default), or booted cold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BootMode {
    /// QEMU boots the kernel (about 20 s to a minute and more under TCG).
    Cold,
    /// QEMU loads the saved state of a booted guest (`-incoming`), see [`super::state`].
    Resume,
}

impl BootMode {
    /// `Cold` when `LAB_COLD_BOOT` is `1`, `true` or `yes`, else `Resume`.
    pub fn from_env() -> BootMode {
        match std::env::var("LAB_COLD_BOOT") {
            Ok(v) if matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes") => BootMode::Cold,
            _ => BootMode::Resume,
        }
    }
}

impl fmt::Display for BootMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BootMode::Cold => "cold boot",
            BootMode::Resume => "resumed",
        })
    }
}

/// Everything [`super::Vm::boot`] needs. Build with [`VmSpec::new`] and set fields as needed.
#[derive(Clone, Debug)]
pub struct VmSpec {
    /// The VM's name: 1–15 of `[a-z0-9-]`, unique within its lab (e.g. `localdns`).
    pub name: String,
    /// The lab it belongs to (e.g. `lab-3`; tests without a lab use e.g. `vmtest-<slot>`):
    /// names the run directory, see [`super::RunDir`].
    pub lab: String,
    pub image: BootImage,
    pub memory_mib: u32,
    pub cpus: u32,
    pub net: Net,
    /// A host directory shared read-only over 9p (mount tag `lab`, the guest mounts it at `/mnt/lab`).
    pub share: Option<PathBuf>,
    /// The network namespace (`/run/netns/<name>`) QEMU runs in; `None`: the caller's.
    pub netns: Option<String>,
    /// Extra kernel command-line words after the lab's own.
    pub extra_append: Vec<String>,
    /// Forces an accelerator; `None`: `LAB_ACCEL`, else detection.
    pub accel: Option<Accel>,
    /// Keep the overlay and run directory when the VM is dropped (also `LAB_KEEP=1`).
    pub keep: bool,
    /// Forces cold boot or resume; `None`: `LAB_COLD_BOOT`, else resume. A spec with
    /// `extra_append` words always boots cold (they would have to be in the saved boot).
    pub boot_mode: Option<BootMode>,
}

impl VmSpec {
    /// A spec with defaults: 2 vCPUs, 2048 MiB, user-mode networking, no share, no netns.
    pub fn new(lab: impl Into<String>, name: impl Into<String>, image: BootImage) -> VmSpec {
        VmSpec {
            name: name.into(),
            lab: lab.into(),
            image,
            memory_mib: 2048,
            cpus: DEFAULT_CPUS,
            net: Net::User,
            share: None,
            netns: None,
            extra_append: Vec::new(),
            accel: None,
            keep: false,
            boot_mode: None,
        }
    }

    /// How this spec starts: cold when forced (field, then `LAB_COLD_BOOT`) or when it has
    /// extra kernel arguments, else resumed.
    pub fn effective_boot_mode(&self) -> BootMode {
        if !self.extra_append.is_empty() {
            return BootMode::Cold;
        }
        self.boot_mode.unwrap_or_else(BootMode::from_env)
    }

    /// Checks the names that end up in paths, process names and the kernel command line.
    pub fn validate(&self) -> Result<(), String> {
        check_name("VM name", &self.name, 15)?;
        check_name("lab name", &self.lab, 32)?;
        if self.memory_mib < 256 {
            return Err(format!(
                "VM {}: memory_mib {} is below 256",
                self.name, self.memory_mib
            ));
        }
        if self.cpus == 0 {
            return Err(format!("VM {}: cpus must be at least 1", self.name));
        }
        for word in &self.extra_append {
            if word.is_empty() || word.contains(char::is_whitespace) {
                return Err(format!(
                    "VM {}: kernel argument {word:?} is empty or contains whitespace",
                    self.name
                ));
            }
        }
        if let Net::Tap { ifname, address, .. } = &self.net {
            if ifname.is_empty() || ifname.len() > 15 || ifname.contains(['/', ' ', ',', '=']) {
                return Err(format!(
                    "VM {}: tap name {ifname:?} is not a valid link name",
                    self.name
                ));
            }
            for (what, value) in [
                ("ip", &address.ip),
                ("gateway", &address.gateway),
                ("dns", &address.dns),
            ] {
                if value.is_empty() || value.contains(char::is_whitespace) {
                    return Err(format!(
                        "VM {}: guest {what} {value:?} is empty or has spaces",
                        self.name
                    ));
                }
            }
        }
        Ok(())
    }
}

fn check_name(what: &str, name: &str, max: usize) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= max
        && !name.starts_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{what} {name:?} must be 1-{max} characters of [a-z0-9-], not starting with '-'"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image() -> BootImage {
        BootImage {
            disk: "/d".into(),
            kernel: "/k".into(),
            initrd: "/i".into(),
        }
    }

    #[test]
    fn derived_mac_is_stable_local_and_differs_per_vm() {
        let a = Mac::derive("lab-1", "node1");
        assert_eq!(a, Mac::derive("lab-1", "node1"));
        assert_ne!(a, Mac::derive("lab-1", "node2"));
        assert_ne!(a, Mac::derive("lab-2", "node1"));
        assert!(a.to_string().starts_with("52:54:00:"), "{a}");
        assert_eq!(a.to_string().len(), 17);
    }

    #[test]
    fn validate_rejects_names_that_would_break_paths_or_the_command_line() {
        let mut spec = VmSpec::new("lab-1", "node1", image());
        assert!(spec.validate().is_ok());
        spec.name = "Node/1".into();
        assert!(spec.validate().unwrap_err().contains("\"Node/1\""));
        spec.name = "a-name-longer-than-15".into();
        assert!(spec.validate().is_err());
        spec.name = "node1".into();
        spec.extra_append = vec!["a b".into()];
        assert!(spec.validate().unwrap_err().contains("whitespace"));
    }

    #[test]
    fn user_networking_uses_slirp_addresses() {
        let address = Net::User.address();
        assert_eq!(address.ip, "10.0.2.15/24");
        assert_eq!(address.gateway, "10.0.2.2");
    }
}
