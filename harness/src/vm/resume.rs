//! What a VM resumed from a saved state needs once QEMU has loaded it: the guest still has the
//! saved boot's clock, address and MAC. One guest command ([`setup_argv`]) sets the clock
//! from the host (roughly: starting the first process after a resume takes a second or two;
//! `guest-set-time` then sets it precisely), gives the NIC the VM's MAC, forgets the saved
//! neighbours (a state saved before the lab's bridge had a fixed MAC holds another lab's), rewrites `/run/systemd/network/10-lab.network`
//! and `/etc/resolv.conf` as `lab-net.service` would from `lab.ip= lab.gw= lab.dns=` (each only
//! when it differs: a resumed joined node keeps its resolver's search and options), has
//! networkd apply them, waits for the address and default route, mounts the 9p share when the VM has one,
//! gives a VM resumed from the image's state (shared by every VM) a machine id of its own, and
//! prints the boot id. From its first reboot on, the guest takes all of this from the kernel
//! command line and NIC of the resumed QEMU, like a cold-booted VM.

use std::time::{SystemTime, UNIX_EPOCH};

use super::error::VmError;
use super::qemu::TEMPLATE_MAC;
use super::qmp;
use super::spec::{Net, VmSpec};

/// How starting a VM failed.
pub enum Launched {
    /// QEMU could not load the saved state (it exited while loading): the state is unusable.
    NotLoaded(VmError),
    /// Anything else.
    Failed(VmError),
}

impl Launched {
    pub fn into_error(self) -> VmError {
        match self {
            Launched::NotLoaded(err) | Launched::Failed(err) => err,
        }
    }
}

/// `query-status` without the `qapi` crate's newer schema (QEMU 7.2 answers a subset).
#[derive(serde::Serialize, Debug)]
pub struct QueryStatus {}

impl qapi::Command for QueryStatus {
    type Ok = serde_json::Value;
    const NAME: &'static str = "query-status";
    const ALLOW_OOB: bool = false;
}

/// `query-migrate`, answered as plain JSON: the crate's `MigrationInfo` has fields that QEMU
/// 7.2 does not send.
#[derive(serde::Serialize, Debug)]
pub struct QueryMigrate {}

impl qapi::Command for QueryMigrate {
    type Ok = serde_json::Value;
    const NAME: &'static str = "query-migrate";
    const ALLOW_OOB: bool = false;
}

/// `migrate` to `uri`.
pub fn migrate(uri: &str) -> qmp::qmp::migrate {
    qmp::qmp::migrate {
        uri: Some(uri.to_string()),
        channels: None,
        detach: None,
        resume: None,
    }
}

/// The script run in the guest after a resume; arguments: unix time, MAC, `ip/prefix`,
/// gateway, DNS server, `1` to mount the share, `1` to give the guest a new machine id.
const SETUP: &str = r##"set -eu
now=$1 mac=$2 ip=$3 gw=$4 dns=$5 share=$6 newid=$7
date -u -s "@$now" >/dev/null
dev=""
for path in /sys/class/net/en*; do
	if [ -e "$path" ]; then dev=${path##*/}; break; fi
done
if [ -z "$dev" ]; then echo "lab resume: no en* network interface" >&2; exit 1; fi
if [ "$(cat "/sys/class/net/$dev/address")" != "$mac" ]; then
	ip link set dev "$dev" address "$mac"
fi
# The saved neighbour entries name the saved lab's MACs: asked again at the next packet.
ip neigh flush dev "$dev"
file=/run/systemd/network/10-lab.network
new=$(printf '%s\n' "# Written by the lab harness after resuming from a saved state." "[Match]" "Name=en*" "" \
	"[Network]" "LinkLocalAddressing=no" "IPv6AcceptRA=no" "Gateway=$gw" "DNS=$dns" "" \
	"[Address]" "Address=$ip" "DuplicateAddressDetection=none")
old=$(sed 1d "$file" 2>/dev/null || true)
if [ "$old" != "$(printf '%s\n' "$new" | sed 1d)" ]; then
	mkdir -p /run/systemd/network
	printf '%s\n' "$new" >"$file.tmp"
	mv -f "$file.tmp" "$file"
	ip addr flush dev "$dev" scope global
	networkctl reload
	networkctl reconfigure "$dev"
fi
if ! grep -qx "nameserver $dns" /etc/resolv.conf 2>/dev/null; then
	printf 'nameserver %s\n' "$dns" >/etc/resolv.conf.lab-tmp
	mv -f /etc/resolv.conf.lab-tmp /etc/resolv.conf
fi
configured() {
	ip -o addr show dev "$dev" | grep -qF " $ip " &&
		ip -4 route show default dev "$dev" | grep -qF "via $gw "
}
tries=300
until configured; do
	tries=$((tries - 1))
	if [ "$tries" -le 0 ]; then
		echo "lab resume: address $ip or default route via $gw did not appear on $dev" >&2
		ip -o addr show dev "$dev" >&2
		ip route >&2
		exit 1
	fi
	sleep 0.2
done
if [ "$share" = 1 ] && ! mountpoint -q /mnt/lab; then mount /mnt/lab; fi
if [ "$newid" = 1 ]; then
	# The saved boot's id is every resumed VM's: draw a new one (vmgenid reseeded the
	# generator), and restart journald so that it writes under the new id from now on.
	if mountpoint -q /etc/machine-id; then umount /etc/machine-id; fi
	tr -d '-' </proc/sys/kernel/random/uuid >/etc/machine-id.lab-tmp
	mv -f /etc/machine-id.lab-tmp /etc/machine-id
	systemctl restart systemd-journald.service
fi
cat /proc/sys/kernel/random/boot_id
"##;

/// The MAC a resumed VM's NIC gets: the spec's on a tap, QEMU's default (as on a cold boot)
/// on user networking.
pub fn mac_of(spec: &VmSpec) -> String {
    match &spec.net {
        Net::Tap { mac, .. } => mac.to_string(),
        Net::User => TEMPLATE_MAC.to_string(),
    }
}

/// Whose identity (`/etc/machine-id`) a resumed VM has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Identity {
    /// A new one: resumed from the image's saved state, which every VM shares.
    New,
    /// The saved VM's own: resumed from a joined node's checkpoint, the same node again.
    Saved,
}

/// The guest command that finishes a resume, with the host's time as of now.
pub fn setup_argv(spec: &VmSpec, identity: Identity) -> Vec<String> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let address = spec.net.address();
    vec![
        "/bin/sh".into(),
        "-c".into(),
        SETUP.into(),
        "lab-resume".into(),
        format!("{}.{:03}", now.as_secs(), now.subsec_millis()),
        mac_of(spec),
        address.ip,
        address.gateway,
        address.dns,
        if spec.share.is_some() { "1" } else { "0" }.into(),
        if identity == Identity::New { "1" } else { "0" }.into(),
    ]
}

/// The boot id on the last line of the setup command's output.
pub fn boot_id_of(stdout: &str) -> Option<String> {
    let id = stdout.lines().last()?.trim();
    super::ready::parse_ready(&format!("READY {id}")).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::spec::{BootImage, GuestAddress, Mac};

    #[test]
    fn setup_carries_the_host_time_and_the_vms_own_mac_and_address() {
        let mut spec = VmSpec::new(
            "lab-3",
            "node1",
            BootImage {
                disk: "/d".into(),
                kernel: "/k".into(),
                initrd: "/i".into(),
            },
        );
        let argv = setup_argv(&spec, Identity::New);
        assert_eq!(
            argv[10], "1",
            "a VM resumed from the image's state gets a new machine id"
        );
        assert_eq!(
            argv[5], "52:54:00:12:34:56",
            "user networking keeps QEMU's default MAC"
        );
        assert_eq!((argv[6].as_str(), argv[9].as_str()), ("10.0.2.15/24", "0"));
        let host_now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let sent: f64 = argv[4].parse().unwrap();
        assert!((host_now - sent).abs() < 5.0, "{sent} vs {host_now}");
        let mac = Mac::derive("lab-3", "node1");
        spec.net = Net::Tap {
            ifname: "labtap3-0".into(),
            mac,
            address: GuestAddress {
                ip: "192.168.103.10/24".into(),
                gateway: "192.168.103.1".into(),
                dns: "192.168.103.1".into(),
            },
        };
        spec.share = Some("/srv".into());
        let argv = setup_argv(&spec, Identity::Saved);
        assert_eq!(
            argv[5..],
            [
                mac.to_string(),
                "192.168.103.10/24".into(),
                "192.168.103.1".into(),
                "192.168.103.1".into(),
                "1".into(),
                "0".into()
            ]
        );
    }

    #[test]
    fn setup_script_is_valid_shell() {
        let out = std::process::Command::new("sh")
            .args(["-n", "-c", SETUP])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    #[test]
    fn boot_id_is_the_last_line() {
        assert_eq!(
            boot_id_of("noise\n0f1e2d3c-aaaa-bbbb-cccc-0123456789ab\n").as_deref(),
            Some("0f1e2d3c-aaaa-bbbb-cccc-0123456789ab")
        );
        assert_eq!(boot_id_of("not an id\n"), None);
        assert_eq!(boot_id_of(""), None);
    }
}
