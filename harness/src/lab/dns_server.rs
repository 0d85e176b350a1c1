//! Serves [`DnsControl`]'s answers over UDP and TCP (RFC 1035 framing) on
//! sockets already bound inside the lab's namespace.

use std::net::SocketAddr;

use hickory_proto::op::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

use super::dns::DnsControl;

/// Largest UDP reply without EDNS (RFC 1035); bigger ones are truncated (TC set).
const PLAIN_UDP_LIMIT: usize = 512;

/// Answers UDP queries until the task is dropped.
pub async fn serve_udp(socket: UdpSocket, dns: DnsControl) {
    let mut buf = vec![0u8; 65535];
    let Ok(server) = socket.local_addr() else {
        tracing::warn!("DNS UDP socket without a local address");
        return;
    };
    loop {
        let (len, from) = match socket.recv_from(&mut buf).await {
            Ok(got) => got,
            Err(err) => {
                tracing::warn!(%err, "DNS UDP receive failed");
                continue;
            }
        };
        let Some(bytes) = reply_bytes(&dns, &buf[..len], from, server, "udp", true) else {
            continue;
        };
        if let Err(err) = socket.send_to(&bytes, from).await {
            tracing::warn!(%err, %from, "DNS UDP reply failed");
        }
    }
}

/// Accepts TCP connections and answers each query on them until the task is dropped.
pub async fn serve_tcp(listener: TcpListener, dns: DnsControl) {
    let Ok(server) = listener.local_addr() else {
        tracing::warn!("DNS TCP listener without a local address");
        return;
    };
    loop {
        match listener.accept().await {
            Ok((stream, from)) => {
                tokio::spawn(serve_tcp_connection(stream, from, server, dns.clone()));
            }
            Err(err) => tracing::warn!(%err, "DNS TCP accept failed"),
        }
    }
}

async fn serve_tcp_connection(mut stream: TcpStream, from: SocketAddr, server: SocketAddr, dns: DnsControl) {
    loop {
        let Ok(len) = stream.read_u16().await else {
            return;
        };
        let mut buf = vec![0u8; len.into()];
        if stream.read_exact(&mut buf).await.is_err() {
            return;
        }
        let Some(bytes) = reply_bytes(&dns, &buf, from, server, "tcp", false) else {
            continue; // "drop" failure mode: leave the client waiting
        };
        let Ok(len) = u16::try_from(bytes.len()) else {
            return;
        };
        if stream.write_u16(len).await.is_err() || stream.write_all(&bytes).await.is_err() {
            return;
        }
    }
}

fn reply_bytes(
    dns: &DnsControl,
    raw: &[u8],
    from: SocketAddr,
    server: SocketAddr,
    protocol: &'static str,
    udp: bool,
) -> Option<Vec<u8>> {
    let request = match Message::from_vec(raw) {
        Ok(request) => request,
        Err(err) => {
            tracing::debug!(%err, %from, "ignoring a malformed DNS message");
            return None;
        }
    };
    let limit = request
        .edns
        .as_ref()
        .map(|e| usize::from(e.max_payload()))
        .unwrap_or(PLAIN_UDP_LIMIT);
    let reply = dns.handle(&request, from, server, protocol)?;
    let bytes = reply.to_vec().ok()?;
    if udp && bytes.len() > limit {
        return reply.truncate().to_vec().ok();
    }
    Some(bytes)
}
