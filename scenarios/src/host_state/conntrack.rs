//! The conntrack table as `conntrack -L` prints it: original and reply tuples per entry.

use std::collections::BTreeMap;

use harness::vm::Vm;

/// One direction of a conntrack entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tuple {
    pub src: String,
    pub dst: String,
    pub sport: Option<u16>,
    pub dport: Option<u16>,
}

impl Tuple {
    /// Whether this direction goes to or comes from `ip:port`.
    pub fn touches(&self, ip: &str, port: u16) -> bool {
        (self.dst == ip && self.dport == Some(port)) || (self.src == ip && self.sport == Some(port))
    }
}

/// One line of `conntrack -L`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConntrackEntry {
    /// `tcp`, `udp`, `icmp`, ...
    pub protocol: String,
    pub original: Tuple,
    pub reply: Tuple,
    pub line: String,
}

impl ConntrackEntry {
    /// Whether either direction goes to or comes from `ip:port`.
    pub fn touches(&self, ip: &str, port: u16) -> bool {
        self.original.touches(ip, port) || self.reply.touches(ip, port)
    }

    /// Whether either direction goes to or comes from `ip`, on any port or protocol.
    pub fn involves(&self, ip: &str) -> bool {
        [&self.original, &self.reply]
            .iter()
            .any(|t| t.src == ip || t.dst == ip)
    }
}

/// Parses `conntrack -L` output: per line the protocol, then the original and the reply tuple
/// (the first and second `src= dst= sport= dport=`). Lines without `src=` are skipped.
pub fn parse_conntrack(text: &str) -> Vec<ConntrackEntry> {
    let mut entries = Vec::new();
    for line in text.lines() {
        let mut tuples = [Tuple::default(), Tuple::default()];
        let mut seen = BTreeMap::<&str, usize>::new();
        for token in line.split_whitespace() {
            let Some((key, value)) = token.split_once('=') else {
                continue;
            };
            if !matches!(key, "src" | "dst" | "sport" | "dport") {
                continue;
            }
            let n = seen.entry(key).or_default();
            if let Some(t) = tuples.get_mut(*n) {
                match key {
                    "src" => t.src = value.to_string(),
                    "dst" => t.dst = value.to_string(),
                    "sport" => t.sport = value.parse().ok(),
                    _ => t.dport = value.parse().ok(),
                }
            }
            *n += 1;
        }
        if seen.contains_key("src") {
            let [original, reply] = tuples;
            entries.push(ConntrackEntry {
                protocol: line.split_whitespace().next().unwrap_or_default().to_string(),
                original,
                reply,
                line: line.to_string(),
            });
        }
    }
    entries
}

/// The VM's IPv4 conntrack table (`conntrack -L -f ipv4`; a failing `conntrack` is an error).
pub fn read_conntrack(vm: &Vm) -> anyhow::Result<Vec<ConntrackEntry>> {
    Ok(parse_conntrack(&vm.run("conntrack -L -f ipv4")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conntrack_lines_split_into_original_and_reply_tuples() {
        let text = "udp      17 28 src=10.244.0.5 dst=10.96.0.10 sport=40001 dport=53 src=10.96.0.10 dst=192.168.101.10 sport=53 dport=40001 mark=0 use=1\n\
                    tcp      6 117 TIME_WAIT src=169.254.10.10 dst=169.254.10.10 sport=5000 dport=8181 src=169.254.10.10 dst=169.254.10.10 sport=8181 dport=5000 [ASSURED] mark=0 use=1\n\
                    conntrack v1.4.7 (conntrack-tools): 2 flow entries have been shown.\n";
        let entries = parse_conntrack(text);
        assert_eq!(entries.len(), 2);
        let dns = &entries[0];
        assert_eq!(dns.protocol, "udp");
        assert_eq!(dns.original.src, "10.244.0.5");
        assert_eq!(dns.original.dport, Some(53));
        assert_eq!(dns.reply.dst, "192.168.101.10");
        assert!(dns.touches("10.96.0.10", 53));
        assert!(!dns.touches("169.254.10.11", 53));
        assert!(entries[1].touches("169.254.10.10", 8181));
        assert!(entries[1].involves("169.254.10.10"));
        assert!(!entries[0].involves("169.254.10.10"));
        assert!(entries[0].involves("192.168.101.10"));
        assert!(!entries[1].touches("169.254.10.10", 53));
    }
}
