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

/// One row of `/proc/net/tcp` or `/proc/net/udp`: the local address, the state, the receive queue
/// (bytes waiting on a UDP socket; connections waiting to be accepted on a listening TCP socket)
/// and the socket's inode.
struct Row<'a> {
    ip: Ipv4Addr,
    port: u16,
    state: &'a str,
    rx_queue: u32,
    inode: u64,
}

fn rows(text: &str) -> impl Iterator<Item = Row<'_>> {
    text.lines().skip(1).filter_map(|line| {
        // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (ip, port) = fields.get(1)?.split_once(':')?;
        let (_, rx_queue) = fields.get(4)?.split_once(':')?;
        Some(Row {
            // The kernel prints the network-order address as a host-order number.
            ip: Ipv4Addr::from(u32::from_str_radix(ip, 16).ok()?.to_ne_bytes()),
            port: u16::from_str_radix(port, 16).ok()?,
            state: fields.get(3)?,
            rx_queue: u32::from_str_radix(rx_queue, 16).ok()?,
            inode: fields.get(9)?.parse().ok()?,
        })
    })
}

/// Whether a row is a listening TCP socket (`0A`) or a bound UDP socket (UDP sockets show `07`,
/// TCP_CLOSE, when merely bound).
fn is_bound(proto: &str, row: &Row<'_>) -> bool {
    proto != "tcp" || row.state == "0A"
}

/// Parses `/proc/net/tcp` or `/proc/net/udp`: TCP sockets in LISTEN, UDP sockets that are bound.
pub fn parse_proc_net(proto: &'static str, text: &str) -> Vec<Bound> {
    rows(text)
        .filter(|row| is_bound(proto, row))
        .map(|row| Bound {
            proto,
            ip: row.ip,
            port: row.port,
        })
        .collect()
}

/// A bound socket with something waiting in its receive queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiting {
    pub proto: &'static str,
    pub ip: Ipv4Addr,
    pub port: u16,
    /// Bytes (UDP) or connections not yet accepted (TCP).
    pub queued: u32,
    pub inode: u64,
}

/// The sockets of `text` (`/proc/net/tcp` or `/proc/net/udp`) bound to `port` of one of `ips` with
/// a non-empty receive queue.
pub fn parse_waiting(proto: &'static str, text: &str, ips: &[Ipv4Addr], port: u16) -> Vec<Waiting> {
    rows(text)
        .filter(|row| is_bound(proto, row) && row.rx_queue > 0 && row.port == port && ips.contains(&row.ip))
        .map(|row| Waiting {
            proto,
            ip: row.ip,
            port: row.port,
            queued: row.rx_queue,
            inode: row.inode,
        })
        .collect()
}

/// This thread's network namespace's sockets on `port` of one of `ips` with something waiting in
/// their receive queue (UDP and TCP).
pub fn waiting_on(ips: &[Ipv4Addr], port: u16) -> Result<Vec<Waiting>, String> {
    let mut all = Vec::new();
    for proto in ["tcp", "udp"] {
        all.extend(parse_waiting(proto, &read_proc_net(proto)?, ips, port));
    }
    Ok(all)
}

/// `/proc/thread-self/net/<proto>`: `/proc/net` follows the main thread, which may be in another
/// network namespace than this thread.
fn read_proc_net(proto: &str) -> Result<String, String> {
    let path = format!("/proc/thread-self/net/{proto}");
    std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path}: {e}"))
}

/// Every listening TCP and bound UDP socket of this thread's network namespace.
pub fn bound_sockets() -> Result<Vec<Bound>, String> {
    let mut all = Vec::new();
    for proto in ["tcp", "udp"] {
        all.extend(parse_proc_net(proto, &read_proc_net(proto)?));
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
    fn waiting_sockets_are_the_bound_ones_on_the_listeners_with_a_receive_queue() {
        // UDP: 169.254.10.10:53 with 0x40 bytes waiting (inode 11), 169.254.10.11:53 with none,
        // 127.0.0.1:53 with some (another address). TCP: a listener on 169.254.10.11:53 with 2
        // connections waiting, an established connection with bytes waiting (not a listener).
        let udp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  1: 0A0AFEA9:0035 00000000:0000 07 00000000:00000040 00:00000000 00000000   991        0 11 2 0 0
  2: 0B0AFEA9:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000   991        0 12 2 0 0
  3: 0100007F:0035 00000000:0000 07 00000000:00000100 00:00000000 00000000     0        0 13 2 0 0
";
        let tcp =
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0B0AFEA9:0035 00000000:0000 0A 00000000:00000002 00:00000000 00000000   991        0 21 1 0 100 0 0 10 0
   1: 0B0AFEA9:0035 0100007F:D431 01 00000000:00000010 00:00000000 00000000   991        0 22 1 0 100 0 0 10 0
";
        let listeners = [Ipv4Addr::new(169, 254, 10, 10), Ipv4Addr::new(169, 254, 10, 11)];
        assert_eq!(
            parse_waiting("udp", udp, &listeners, 53),
            [Waiting {
                proto: "udp",
                ip: listeners[0],
                port: 53,
                queued: 0x40,
                inode: 11
            }]
        );
        assert_eq!(
            parse_waiting("tcp", tcp, &listeners, 53),
            [Waiting {
                proto: "tcp",
                ip: listeners[1],
                port: 53,
                queued: 2,
                inode: 21
            }]
        );
        assert_eq!(parse_waiting("udp", udp, &listeners, 54), []);
    }

    #[test]
    fn a_datagram_nobody_reads_waits_in_its_sockets_queue() {
        let ip = Ipv4Addr::new(127, 0, 0, 1);
        let reader = UdpSocket::bind((ip, 0)).unwrap();
        let port = reader.local_addr().unwrap().port();
        assert_eq!(waiting_on(&[ip], port).unwrap(), []);
        UdpSocket::bind((ip, 0))
            .unwrap()
            .send_to(b"query", (ip, port))
            .unwrap();
        let waiting = waiting_on(&[ip], port).unwrap();
        assert_eq!(waiting.len(), 1, "{waiting:?}");
        assert_eq!((waiting[0].proto, waiting[0].port), ("udp", port));
        assert!(waiting[0].queued > 0, "{waiting:?}");
        let mut buf = [0u8; 16];
        reader.recv(&mut buf).unwrap();
        assert_eq!(waiting_on(&[ip], port).unwrap(), []);
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
