//! Safe newtypes for values that reach unit files, the Corefile or nft rules.
//!
//! Each type is built through `TryFrom`/`FromStr` and rejects what could break
//! the file it lands in (newlines, spaces, separators), so a rendered file can
//! only hold values that were checked once, here.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Why a value was refused; the message is written to follow `<JSON path>: `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NameError(pub String);

fn err<T>(msg: impl Into<String>) -> Result<T, NameError> {
    Err(NameError(msg.into()))
}

/// One of the two fixed nspawn machine slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Slot {
    #[default]
    Kube1,
    Kube2,
}

impl Slot {
    pub const ALL: [Slot; 2] = [Slot::Kube1, Slot::Kube2];

    pub fn as_str(self) -> &'static str {
        match self {
            Slot::Kube1 => "kube1",
            Slot::Kube2 => "kube2",
        }
    }

    /// The other slot (a repave moves between them).
    pub fn other(self) -> Slot {
        match self {
            Slot::Kube1 => Slot::Kube2,
            Slot::Kube2 => Slot::Kube1,
        }
    }
}

impl fmt::Display for Slot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Slot {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, NameError> {
        match s {
            "kube1" => Ok(Slot::Kube1),
            "kube2" => Ok(Slot::Kube2),
            _ => err(format!("machine slot {s:?} is neither \"kube1\" nor \"kube2\"")),
        }
    }
}

/// An IPv4 address a service can listen on or send to: not unspecified,
/// multicast, broadcast or loopback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct UnicastIpv4(Ipv4Addr);

impl UnicastIpv4 {
    pub fn addr(self) -> Ipv4Addr {
        self.0
    }
}

impl TryFrom<Ipv4Addr> for UnicastIpv4 {
    type Error = NameError;
    fn try_from(ip: Ipv4Addr) -> Result<Self, NameError> {
        if ip.is_unspecified() {
            err(format!("{ip} is the unspecified address"))
        } else if ip.is_multicast() {
            err(format!("{ip} is a multicast address"))
        } else if ip.is_loopback() {
            err(format!("{ip} is a loopback address"))
        } else if ip.is_broadcast() {
            err(format!("{ip} is the broadcast address"))
        } else {
            Ok(UnicastIpv4(ip))
        }
    }
}

impl FromStr for UnicastIpv4 {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, NameError> {
        let ip: Ipv4Addr = s
            .parse()
            .map_err(|_| NameError(format!("{s:?} is not an IPv4 address")))?;
        UnicastIpv4::try_from(ip)
    }
}

impl fmt::Display for UnicastIpv4 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// `IPv4:port` for the CoreDNS metrics endpoint: a unicast, non-loopback
/// address and a port in 1–65535 (never a wildcard).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(into = "String")]
pub struct MetricsAddress(SocketAddrV4);

impl MetricsAddress {
    /// The port CoreDNS's prometheus plugin uses by default.
    pub const DEFAULT_PORT: u16 = 9253;

    pub fn new(ip: UnicastIpv4, port: u16) -> Result<Self, NameError> {
        if port == 0 {
            return err("port 0 is not a usable port (1-65535)");
        }
        Ok(MetricsAddress(SocketAddrV4::new(ip.addr(), port)))
    }

    pub fn socket_addr(self) -> SocketAddrV4 {
        self.0
    }
}

impl From<MetricsAddress> for String {
    fn from(m: MetricsAddress) -> String {
        m.to_string()
    }
}

impl FromStr for MetricsAddress {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, NameError> {
        let Some((ip, port)) = s.rsplit_once(':') else {
            return err(format!("{s:?} is not IPv4:port"));
        };
        let ip: Ipv4Addr = ip
            .parse()
            .map_err(|_| NameError(format!("{s:?} is not IPv4:port")))?;
        let port: u16 = port
            .parse()
            .map_err(|_| NameError(format!("{s:?}: port {port:?} is not a number in 1-65535")))?;
        let ip = UnicastIpv4::try_from(ip).map_err(|e| NameError(format!("{s:?}: {e}")))?;
        MetricsAddress::new(ip, port).map_err(|e| NameError(format!("{s:?}: {e}")))
    }
}

impl fmt::Display for MetricsAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A DNS subdomain name as Kubernetes uses for object names (node and machine
/// names): lowercase letters, digits, `-` and `.`, labels of 1–63 characters
/// starting and ending alphanumeric, at most 253 characters.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct DnsName(String);

impl DnsName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for DnsName {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, NameError> {
        if s.is_empty() {
            return err("must not be empty");
        }
        if s.len() > 253 {
            return err(format!("{s:?} is longer than 253 characters"));
        }
        for label in s.split('.') {
            let ok_chars = label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            let ok_ends = label.starts_with(|c: char| c.is_ascii_alphanumeric())
                && label.ends_with(|c: char| c.is_ascii_alphanumeric());
            if label.is_empty() || label.len() > 63 || !ok_chars || !ok_ends {
                return err(format!(
                    "{s:?} is not a DNS name (lowercase letters, digits, '-' and '.', labels of 1-63 \
                     characters starting and ending with a letter or digit)"
                ));
            }
        }
        Ok(DnsName(s.to_owned()))
    }
}

impl fmt::Display for DnsName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A CoreDNS plugin name: `^[a-z][a-z0-9_-]*$` after trimming and lowercasing.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct PluginName(String);

impl PluginName {
    /// Plugins the built-in Corefile uses; always required.
    pub const BASELINE: [&'static str; 8] = [
        "bind",
        "cache",
        "errors",
        "forward",
        "loop",
        "prometheus",
        "ready",
        "whoami",
    ];

    /// Normalises (trim, lowercase) and checks a plugin name.
    pub fn normalise(s: &str) -> Result<Self, NameError> {
        let n = s.trim().to_ascii_lowercase();
        let mut bytes = n.bytes();
        let first_ok = bytes.next().is_some_and(|b| b.is_ascii_lowercase());
        let rest_ok = bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if first_ok && rest_ok {
            Ok(PluginName(n))
        } else {
            err(format!(
                "{s:?} is not a plugin name (^[a-z][a-z0-9_-]*$ after trimming and lowercasing)"
            ))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PluginName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An absolute path that is safe inside a unit file's `ExecStart=`: printable
/// ASCII without spaces, quotes, `%`, `$`, `\` or `;`, and no `..` component.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct UnitPath(String);

impl UnitPath {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for UnitPath {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, NameError> {
        if !s.starts_with('/') {
            return err(format!("{s:?} is not an absolute path"));
        }
        let bad = |c: char| !c.is_ascii_graphic() || "\"'%$\\;`".contains(c);
        if let Some(c) = s.chars().find(|&c| bad(c)) {
            return err(format!(
                "{s:?} contains {c:?}, which is not allowed in a unit file path"
            ));
        }
        if s.split('/').any(|part| part == "..") {
            return err(format!("{s:?} contains a \"..\" component"));
        }
        let trimmed = if s.len() > 1 { s.trim_end_matches('/') } else { s };
        Ok(UnitPath(trimmed.to_owned()))
    }
}

impl fmt::Display for UnitPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A CoreDNS version, normalised without a leading `v` (`1.12.4`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Version(String);

impl Version {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for Version {
    type Err = NameError;
    /// Accepts `X.Y.Z` or `vX.Y.Z`, with an optional `-suffix` of letters, digits and dots.
    fn from_str(s: &str) -> Result<Self, NameError> {
        let t = s.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        let (core, suffix) = t.split_once('-').unwrap_or((t, ""));
        let parts: Vec<&str> = core.split('.').collect();
        let core_ok = parts.len() == 3
            && parts
                .iter()
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        let suffix_ok = suffix.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.');
        if core_ok && suffix_ok && (suffix.is_empty() != t.contains('-')) {
            Ok(Version(t.to_owned()))
        } else {
            err(format!("{s:?} is not a version (X.Y.Z or vX.Y.Z)"))
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `a.b.c.d/n` with n in 8–30 and no bits set below the prefix.
pub fn check_ipv4_cidr(text: &str) -> Result<(), String> {
    let bad = || format!("{text:?} is not an IPv4 network like 10.244.1.0/24");
    let (ip, len) = text.split_once('/').ok_or_else(bad)?;
    let ip: Ipv4Addr = ip.parse().map_err(|_| bad())?;
    let len: u32 = len.parse().map_err(|_| bad())?;
    if !(8..=30).contains(&len) {
        return Err(format!("{text:?}: prefix length {len} is outside 8-30"));
    }
    let host_bits = u32::from(ip) & (u32::MAX >> len);
    if host_bits != 0 {
        return Err(format!(
            "{text:?} has host bits set (the network is {})",
            Ipv4Addr::from(u32::from(ip) & !(u32::MAX >> len))
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("0.0.0.0", "unspecified")]
    #[case("224.0.0.1", "multicast")]
    #[case("127.0.0.1", "loopback")]
    #[case("255.255.255.255", "broadcast")]
    #[case("fe80::1", "not an IPv4")]
    #[case("169.254.10.10\n", "not an IPv4")]
    fn unicast_ipv4_refuses(#[case] input: &str, #[case] why: &str) {
        let e = input.parse::<UnicastIpv4>().unwrap_err();
        assert!(e.0.contains(why), "{e}");
    }

    #[rstest]
    #[case("10.0.0.1:9253", true)]
    #[case("10.0.0.1:0", false)]
    #[case("10.0.0.1:65536", false)]
    #[case("0.0.0.0:9253", false)]
    #[case("127.0.0.1:9253", false)]
    #[case(":9253", false)]
    #[case("10.0.0.1", false)]
    #[case("[::1]:9253", false)]
    fn metrics_address_accepts_only_unicast_ipv4_with_a_port(#[case] input: &str, #[case] ok: bool) {
        assert_eq!(input.parse::<MetricsAddress>().is_ok(), ok, "{input}");
    }

    #[rstest]
    #[case("node-1", true)]
    #[case("node-1.lab.example", true)]
    #[case("Node1", false)]
    #[case("node 1", false)]
    #[case("node\n1", false)]
    #[case("-node", false)]
    #[case("", false)]
    #[case("a..b", false)]
    fn dns_name_allows_only_lowercase_labels(#[case] input: &str, #[case] ok: bool) {
        assert_eq!(input.parse::<DnsName>().is_ok(), ok, "{input:?}");
    }

    #[rstest]
    #[case(" Rewrite ", Some("rewrite"))]
    #[case("k8s_external", Some("k8s_external"))]
    #[case("1cache", None)]
    #[case("ca che", None)]
    #[case("", None)]
    fn plugin_names_are_trimmed_lowercased_and_checked(#[case] input: &str, #[case] want: Option<&str>) {
        assert_eq!(
            PluginName::normalise(input).ok().as_ref().map(PluginName::as_str),
            want
        );
    }

    #[rstest]
    #[case("/usr/local", true)]
    #[case("/opt/unbounded/", true)]
    #[case("usr/local", false)]
    #[case("/usr/lo cal", false)]
    #[case("/usr/local;rm", false)]
    #[case("/usr/../etc", false)]
    #[case("/usr/local\n", false)]
    #[case("/usr/50%n", false)]
    #[case("/usr/\"q\"", false)]
    #[case("/usr/it's", false)]
    #[case("/usr/$HOME", false)]
    fn unit_paths_are_absolute_and_free_of_separators(#[case] input: &str, #[case] ok: bool) {
        assert_eq!(input.parse::<UnitPath>().is_ok(), ok, "{input:?}");
    }

    #[rstest]
    #[case("v1.12.4", Some("1.12.4"))]
    #[case("1.12.4", Some("1.12.4"))]
    #[case(" v1.13.0-rc.1 ", Some("1.13.0-rc.1"))]
    #[case("1.12", None)]
    #[case("latest", None)]
    #[case("1.12.4-", None)]
    fn versions_are_normalised_without_v(#[case] input: &str, #[case] want: Option<&str>) {
        assert_eq!(input.parse::<Version>().ok().as_ref().map(Version::as_str), want);
    }

    #[test]
    fn slots_parse_and_print() {
        assert_eq!("kube2".parse::<Slot>().unwrap(), Slot::Kube2);
        assert!("kube3".parse::<Slot>().is_err());
        assert_eq!(Slot::Kube1.other().to_string(), "kube2");
    }
}
