//! Sockets bound in this thread's network namespace, from the kernel's `sock_diag` dumps (netlink):
//! TCP sockets in LISTEN and UDP sockets that are bound, each with its receive queue and inode.
//! The machine shares the host's network, so the agent on the host and the supervisor in the
//! machine see the same sockets.
//!
//! Not `/proc/net/{tcp,udp}`: reading `/proc/net/tcp` walks the whole established-connection hash
//! table, whose size follows the host's memory, not its sockets — 8.6 ms a read on the 24 GiB
//! build host with a handful of sockets, which at the supervisor's five looks a second is 4 % of a
//! CPU (docs/perf.md). A dump of TCP sockets in LISTEN only walks the listening hash, and the
//! kernel keeps only those on the asked port.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr};

use netlink_packet_core::{NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload};
use netlink_packet_sock_diag::SockDiagMessage;
use netlink_packet_sock_diag::constants::{AF_INET, IPPROTO_TCP, IPPROTO_UDP};
use netlink_packet_sock_diag::inet::{ExtensionFlags, InetRequest, SocketId, StateFlags};
use netlink_sys::protocols::NETLINK_SOCK_DIAG;
use netlink_sys::{Socket, SocketAddr};

/// A socket bound on this host: a TCP socket in LISTEN or a bound UDP socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    pub proto: &'static str,
    pub ip: Ipv4Addr,
    pub port: u16,
}

/// One socket of a dump: its local address, its receive queue (bytes waiting on a UDP socket;
/// connections waiting to be accepted on a listening TCP socket) and its inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Row {
    proto: &'static str,
    ip: Ipv4Addr,
    port: u16,
    rx_queue: u32,
    inode: u64,
}

/// The IPv4 TCP sockets in LISTEN and the IPv4 UDP sockets of this thread's network namespace
/// (on `port` only, unless 0).
fn dump_bound(port: u16) -> Result<Vec<Row>, String> {
    let mut rows = dump("tcp", IPPROTO_TCP, StateFlags::LISTEN, port)?;
    rows.extend(dump("udp", IPPROTO_UDP, StateFlags::all(), port)?);
    // The kernel filters on the port already; a kernel that did not is filtered here.
    rows.retain(|row| port == 0 || row.port == port);
    Ok(rows)
}

/// One `sock_diag` dump of `protocol`'s IPv4 sockets in `states` (on `port`, unless 0).
fn dump(proto: &'static str, protocol: u8, states: StateFlags, port: u16) -> Result<Vec<Row>, String> {
    let fail =
        |what: &str, e: &dyn std::fmt::Display| format!("sock_diag dump of {proto} sockets: {what}: {e}");
    let mut socket = Socket::new(NETLINK_SOCK_DIAG).map_err(|e| fail("socket", &e))?;
    socket.bind_auto().map_err(|e| fail("bind", &e))?;
    socket
        .connect(&SocketAddr::new(0, 0))
        .map_err(|e| fail("connect", &e))?;
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_DUMP;
    let mut socket_id = SocketId::new_v4();
    socket_id.source_port = port;
    let mut request = NetlinkMessage::new(
        header,
        SockDiagMessage::InetRequest(InetRequest {
            family: AF_INET,
            protocol,
            extensions: ExtensionFlags::empty(),
            states,
            socket_id,
        })
        .into(),
    );
    request.finalize();
    let mut buf = vec![0; request.buffer_len()];
    request.serialize(&mut buf);
    socket.send(&buf, 0).map_err(|e| fail("send", &e))?;

    let mut rows = Vec::new();
    loop {
        let (datagram, _) = socket.recv_from_full().map_err(|e| fail("receive", &e))?;
        let mut at = 0;
        while at < datagram.len() {
            let message = NetlinkMessage::<SockDiagMessage>::deserialize(&datagram[at..])
                .map_err(|e| fail("a reply that does not parse", &e))?;
            let length = message.header.length as usize;
            match message.payload {
                NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(response)) => {
                    let id = &response.header.socket_id;
                    if let IpAddr::V4(ip) = id.source_address {
                        rows.push(Row {
                            proto,
                            ip,
                            port: id.source_port,
                            rx_queue: response.header.recv_queue,
                            inode: u64::from(response.header.inode),
                        });
                    }
                }
                NetlinkPayload::Done(_) => return Ok(rows),
                NetlinkPayload::Error(e) => return Err(fail("the kernel answered", &e.to_io())),
                _ => {}
            }
            if length == 0 {
                break;
            }
            at += length;
        }
    }
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

/// The sockets of `rows` bound to `port` of one of `ips` with a non-empty receive queue.
fn waiting_among(rows: &[Row], ips: &[Ipv4Addr], port: u16) -> Vec<Waiting> {
    rows.iter()
        .filter(|row| row.rx_queue > 0 && row.port == port && ips.contains(&row.ip))
        .map(|row| Waiting {
            proto: row.proto,
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
    Ok(waiting_among(&dump_bound(port)?, ips, port))
}

/// Every listening TCP and bound UDP socket of this thread's network namespace.
pub fn bound_sockets() -> Result<Vec<Bound>, String> {
    Ok(dump_bound(0)?
        .into_iter()
        .map(|row| Bound {
            proto: row.proto,
            ip: row.ip,
            port: row.port,
        })
        .collect())
}

/// The inodes of the sockets process `pid` holds (`socket:[<inode>]` in `/proc/<pid>/fd`);
/// `None` when its descriptors cannot be read (it is gone, or another user's).
pub fn socket_inodes(pid: u32) -> Option<HashSet<u64>> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    Some(
        fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
            .filter_map(|target| {
                let target = target.to_str()?;
                target.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
            })
            .collect(),
    )
}

/// The listening TCP and bound UDP sockets on `port` of this thread's network namespace that are
/// among `inodes` (one process's: [`socket_inodes`]).
pub fn bound_among(inodes: &HashSet<u64>, port: u16) -> Result<Vec<Bound>, String> {
    Ok(dump_bound(port)?
        .into_iter()
        .filter(|row| inodes.contains(&row.inode))
        .map(|row| Bound {
            proto: row.proto,
            ip: row.ip,
            port: row.port,
        })
        .collect())
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
    use std::os::fd::AsRawFd;

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
    fn waiting_sockets_are_the_ones_on_the_listeners_with_a_receive_queue() {
        let listeners = [Ipv4Addr::new(169, 254, 10, 10), Ipv4Addr::new(169, 254, 10, 11)];
        let row = |proto, ip, port, rx_queue, inode| Row {
            proto,
            ip,
            port,
            rx_queue,
            inode,
        };
        let rows = [
            // Bytes waiting on the node listener's UDP socket, none on the cluster listener's.
            row("udp", listeners[0], 53, 0x40, 11),
            row("udp", listeners[1], 53, 0, 12),
            // Another address, another port.
            row("udp", Ipv4Addr::LOCALHOST, 53, 0x100, 13),
            row("udp", listeners[0], 54, 0x100, 14),
            // Two connections waiting to be accepted on the cluster listener.
            row("tcp", listeners[1], 53, 2, 21),
        ];
        assert_eq!(
            waiting_among(&rows, &listeners, 53),
            [
                Waiting {
                    proto: "udp",
                    ip: listeners[0],
                    port: 53,
                    queued: 0x40,
                    inode: 11
                },
                Waiting {
                    proto: "tcp",
                    ip: listeners[1],
                    port: 53,
                    queued: 2,
                    inode: 21
                }
            ]
        );
        assert_eq!(waiting_among(&rows, &listeners, 55), []);
    }

    #[test]
    fn a_connection_nobody_accepts_waits_in_the_listeners_queue_with_the_listeners_inode() {
        let ip = Ipv4Addr::new(127, 0, 0, 1);
        let listener = TcpListener::bind((ip, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        assert_eq!(waiting_on(&[ip], port).unwrap(), []);
        let _client = std::net::TcpStream::connect((ip, port)).unwrap();
        let waiting = waiting_on(&[ip], port).unwrap();
        assert_eq!(waiting.len(), 1, "{waiting:?}");
        assert_eq!((waiting[0].proto, waiting[0].queued), ("tcp", 1));
        let inode = std::fs::read_link(format!("/proc/self/fd/{}", listener.as_raw_fd())).unwrap();
        assert_eq!(inode.to_str().unwrap(), format!("socket:[{}]", waiting[0].inode));
        // Accepted: nothing waits, and the established connection on the port is not a listener.
        let (_accepted, _) = listener.accept().unwrap();
        assert_eq!(waiting_on(&[ip], port).unwrap(), []);
        assert_eq!(held_on(&bound_sockets().unwrap(), ip, port), (0, 1));
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
