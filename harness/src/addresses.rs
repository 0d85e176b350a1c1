//! A lab's names and addresses (see docs/lab.md). The names on this host follow the lab's
//! number `n`; what a VM sees does not: every lab has the same subnet, inside its own network
//! namespace, so a VM's address, gateway, DNS server and MAC are the same in any lab and a
//! saved joined node ([`crate::checkpoint`]) resumes in whichever lab a test gets.
//!
//! | what                 | value                          |
//! |----------------------|--------------------------------|
//! | network namespace    | `lab-<n>`                      |
//! | bridge               | `labbr<n>`, `192.168.100.1/24`, MAC `02:6c:61:62:00:01` |
//! | upstream DNS         | `192.168.100.1:53` (UDP and TCP) |
//! | second upstream DNS  | `192.168.100.2:53`, the same server (tests moving a VM's resolver) |
//! | artifact HTTP server | `192.168.100.1:8080`           |
//! | Kind node, API server | `192.168.100.3`, `192.168.100.3:6443` |
//! | VM `k` (from 0)      | tap `labtap<n>-<k>`, `192.168.100.<10+k>`, MAC `52:54:00:6c:00:<k>` |

use std::net::{Ipv4Addr, SocketAddr};

/// The lab number reserved for `harness lab up`; tests use `NEXTEST_TEST_GLOBAL_SLOT + 1`.
pub const INTERACTIVE_LAB: u8 = 0;
/// The highest lab number (names and host ports stay short and distinct up to it).
pub const MAX_LAB: u8 = 154;
/// The third octet of every lab's subnet, `192.168.100.0/24`.
const SUBNET_OCTET: u8 = 100;
/// How many VMs one lab can hold (`.10` up to `.249`).
pub const MAX_VMS: u8 = 240;
/// The artifact HTTP server's port on the bridge address.
pub const HTTP_PORT: u16 = 8080;
/// The upstream DNS server's port on the bridge address.
pub const DNS_PORT: u16 = 53;
/// The API server's port on the bridge address (control plane, later).
pub const API_SERVER_PORT: u16 = 6443;
/// Prefix length of the lab subnet.
pub const PREFIX_LEN: u8 = 24;

/// Names and addresses of lab number `n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LabAddrs {
    n: u8,
}

/// The pod CIDR of lab VM `k`: `10.244.<k>.0/24` (the lab routes it to the VM, the node's
/// kubelet gets it).
pub fn pod_cidr(k: u8) -> String {
    format!("10.244.{k}.0/24")
}

impl LabAddrs {
    /// The addresses of lab `n`; `None` when `n` is above [`MAX_LAB`].
    pub fn new(n: u8) -> Option<LabAddrs> {
        (n <= MAX_LAB).then_some(LabAddrs { n })
    }

    pub fn number(&self) -> u8 {
        self.n
    }

    /// The network namespace, `lab-<n>`.
    pub fn netns(&self) -> String {
        format!("lab-{}", self.n)
    }

    /// The bridge inside the namespace, `labbr<n>`.
    pub fn bridge(&self) -> String {
        format!("labbr{}", self.n)
    }

    /// The tap of VM `k`, `labtap<n>-<k>` (at most 12 characters).
    pub fn tap(&self, k: u8) -> String {
        format!("labtap{}-{}", self.n, k)
    }

    /// The bridge's address, where every lab service listens: `192.168.100.1` in every lab.
    pub fn bridge_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(192, 168, SUBNET_OCTET, 1)
    }

    /// The bridge's MAC, `02:6c:61:62:00:01` (locally administered, "lab") in every lab: a
    /// resumed guest's neighbour entry for its gateway stays right. With the kernel's choice (the
    /// first tap's random MAC) a checkpoint's guest sent to the saved lab's MAC until that entry
    /// expired, up to ~55 s of a kubelet reaching nothing after a resume.
    pub fn bridge_mac(&self) -> &'static str {
        "02:6c:61:62:00:01"
    }

    /// The upstream DNS server the VMs use.
    pub fn dns(&self) -> SocketAddr {
        SocketAddr::from((self.bridge_ip(), DNS_PORT))
    }

    /// A second address on the bridge where the same DNS server answers too: a test points a
    /// VM's resolver at it and tells from [`crate::lab::DnsQuery::server`] which one was asked.
    pub fn second_dns_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(192, 168, SUBNET_OCTET, 2)
    }

    /// The second upstream DNS server, [`LabAddrs::second_dns_ip`]`:53`.
    pub fn second_dns(&self) -> SocketAddr {
        SocketAddr::from((self.second_dns_ip(), DNS_PORT))
    }

    /// The artifact HTTP server.
    pub fn http(&self) -> SocketAddr {
        SocketAddr::from((self.bridge_ip(), HTTP_PORT))
    }

    /// The artifact server's base URL, `http://192.168.100.1:8080`.
    pub fn http_url(&self) -> String {
        format!("http://{}", self.http())
    }

    /// The address of VM `k`, `192.168.100.<10+k>` in every lab.
    pub fn vm_ip(&self, k: u8) -> Option<Ipv4Addr> {
        (k < MAX_VMS).then(|| Ipv4Addr::new(192, 168, SUBNET_OCTET, 10 + k))
    }

    /// The MAC of VM `k`: QEMU's prefix `52:54:00`, then `6c` ("l"), `00`, `k` (every lab has
    /// its own bridge, so the same MAC in two labs never meets).
    pub fn vm_mac(&self, k: u8) -> String {
        format!("52:54:00:6c:00:{k:02x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_cidr_follows_the_vm_index() {
        assert_eq!(pod_cidr(0), "10.244.0.0/24");
        assert_eq!(pod_cidr(7), "10.244.7.0/24");
    }

    #[test]
    fn names_fit_the_kernels_fifteen_characters() {
        let lab = LabAddrs::new(MAX_LAB).unwrap();
        assert!(lab.tap(MAX_VMS - 1).len() <= 15, "{}", lab.tap(MAX_VMS - 1));
        assert!(lab.bridge().len() <= 15);
        assert!(LabAddrs::new(MAX_LAB + 1).is_none());
    }

    #[test]
    fn host_names_follow_the_lab_number_and_what_a_vm_sees_does_not() {
        let lab = LabAddrs::new(3).unwrap();
        assert_eq!(lab.netns(), "lab-3");
        assert_eq!(lab.bridge(), "labbr3");
        assert_eq!(lab.tap(1), "labtap3-1");
        assert_eq!(lab.bridge_ip(), Ipv4Addr::new(192, 168, 100, 1));
        assert_eq!(lab.dns().to_string(), "192.168.100.1:53");
        assert_eq!(lab.http_url(), "http://192.168.100.1:8080");
        assert_eq!(lab.vm_ip(0), Some(Ipv4Addr::new(192, 168, 100, 10)));
        assert_eq!(lab.vm_ip(MAX_VMS), None);
        assert_eq!(lab.vm_mac(2), "52:54:00:6c:00:02");
        let other = LabAddrs::new(1).unwrap();
        assert_ne!(other.netns(), lab.netns());
        assert_eq!(
            (
                other.bridge_ip(),
                other.bridge_mac(),
                other.vm_ip(2),
                other.vm_mac(2)
            ),
            (lab.bridge_ip(), lab.bridge_mac(), lab.vm_ip(2), lab.vm_mac(2)),
            "a VM sees the same addresses in every lab"
        );
    }
}
