//! Sockets bound in this thread's network namespace, from `/proc/thread-self/net/{tcp,udp}`: TCP
//! sockets in LISTEN and UDP sockets that are bound. The machine shares the host's network, so the
//! agent on the host and the supervisor in the machine see the same sockets.

use std::net::Ipv4Addr;

/// A socket bound on this host (from `/proc/net/{tcp,udp}` of the current network namespace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    pub proto: &'static str,
    pub ip: Ipv4Addr,
    pub port: u16,
}

/// Parses `/proc/net/tcp` or `/proc/net/udp`: TCP sockets in LISTEN, UDP sockets that are bound.
pub fn parse_proc_net(proto: &'static str, text: &str) -> Vec<Bound> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let local = fields.nth(1)?;
            let state = fields.nth(1)?;
            // TCP_LISTEN is 0A; UDP sockets show 07 (TCP_CLOSE) when merely bound.
            if proto == "tcp" && state != "0A" {
                return None;
            }
            let (ip, port) = local.split_once(':')?;
            // The kernel prints the network-order address as a host-order number.
            let ip = Ipv4Addr::from(u32::from_str_radix(ip, 16).ok()?.to_ne_bytes());
            Some(Bound {
                proto,
                ip,
                port: u16::from_str_radix(port, 16).ok()?,
            })
        })
        .collect()
}

/// Every listening TCP and bound UDP socket of this thread's network namespace.
pub fn bound_sockets() -> Result<Vec<Bound>, String> {
    let mut all = Vec::new();
    for proto in ["tcp", "udp"] {
        // `thread-self`: `/proc/net` follows the main thread, which may be in another namespace.
        let path = format!("/proc/thread-self/net/{proto}");
        let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path}: {e}"))?;
        all.extend(parse_proc_net(proto, &text));
    }
    Ok(all)
}

/// How many UDP and how many TCP sockets of `bound` are bound to `ip:port`.
pub fn held_on(bound: &[Bound], ip: Ipv4Addr, port: u16) -> (usize, usize) {
    let count = |proto: &str| {
        bound
            .iter()
            .filter(|b| b.proto == proto && b.ip == ip && b.port == port)
            .count()
    };
    (count("udp"), count("tcp"))
}

/// Each of `listeners` holding fewer than `wanted` UDP or `wanted` TCP sockets on `port`, described
/// (`169.254.10.10:53 has 1 UDP and 0 TCP socket(s)`); empty when every listener holds enough.
pub fn short_of(bound: &[Bound], listeners: &[Ipv4Addr], port: u16, wanted: usize) -> Vec<String> {
    listeners
        .iter()
        .filter_map(|ip| {
            let (udp, tcp) = held_on(bound, *ip, port);
            (udp < wanted || tcp < wanted)
                .then(|| format!("{ip}:{port} has {udp} UDP and {tcp} TCP socket(s)"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, UdpSocket};

    #[test]
    fn listeners_short_of_sockets_are_named_with_what_they_hold() {
        let a = Ipv4Addr::new(169, 254, 10, 10);
        let b = Ipv4Addr::new(169, 254, 10, 11);
        let bound = [
            Bound {
                proto: "udp",
                ip: a,
                port: 53,
            },
            Bound {
                proto: "tcp",
                ip: a,
                port: 53,
            },
            Bound {
                proto: "udp",
                ip: b,
                port: 53,
            },
            Bound {
                proto: "tcp",
                ip: b,
                port: 8181,
            },
        ];
        assert_eq!(short_of(&bound, &[a], 53, 1), Vec::<String>::new());
        assert_eq!(
            short_of(&bound, &[a, b], 53, 1),
            ["169.254.10.11:53 has 1 UDP and 0 TCP socket(s)"]
        );
        assert_eq!(
            short_of(&bound, &[a], 53, 2),
            ["169.254.10.10:53 has 1 UDP and 1 TCP socket(s)"]
        );
    }

    #[test]
    fn sockets_this_process_binds_are_counted_per_protocol_on_their_address_and_port() {
        let ip = Ipv4Addr::new(127, 0, 0, 1);
        let tcp = TcpListener::bind((ip, 0)).unwrap();
        let port = tcp.local_addr().unwrap().port();
        let udp = UdpSocket::bind((ip, port)).unwrap();
        let bound = bound_sockets().unwrap();
        assert_eq!(held_on(&bound, ip, port), (1, 1));
        assert_eq!(held_on(&bound, Ipv4Addr::new(127, 0, 0, 2), port), (0, 0));
        drop(udp);
        assert_eq!(held_on(&bound_sockets().unwrap(), ip, port), (0, 1));
        drop(tcp);
        assert_eq!(held_on(&bound_sockets().unwrap(), ip, port), (0, 0));
    }
}
