//! Health probes of one listener: `GET http://<L>:<ready port>/ready` == `OK` (a plain HTTP/1.1
//! request on a TCP socket: no proxy can ever be involved) and a UDP DNS query answered NOERROR.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

use super::Settings;
use super::settings::DNS_PORT;

/// A probe that did not pass, naming what was probed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    #[error("GET http://{target}/ready: {reason}")]
    Ready { target: SocketAddrV4, reason: String },
    #[error("DNS query {name} to {target}: {reason}")]
    Dns {
        target: SocketAddrV4,
        name: String,
        reason: String,
    },
}

async fn within<T>(timeout: Duration, fut: impl Future<Output = Result<T, String>>) -> Result<T, String> {
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| format!("no answer within {timeout:?}"))?
}

/// The body of an HTTP/1.1 response if its status is 200 (handles `Transfer-Encoding: chunked`).
fn body_of_ok_response(raw: &[u8]) -> Result<String, String> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").ok_or("incomplete HTTP response")?;
    let status = head.lines().next().unwrap_or("");
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("status line {status:?}"));
    }
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if !chunked {
        return Ok(body.to_owned());
    }
    let mut out = String::new();
    let mut rest = body;
    loop {
        let (size, after) = rest.split_once("\r\n").ok_or("truncated chunk")?;
        let size = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| format!("bad chunk size {size:?}"))?;
        if size == 0 {
            return Ok(out);
        }
        let chunk = after.get(..size).ok_or("truncated chunk")?;
        out.push_str(chunk);
        rest = after.get(size..).unwrap_or("").trim_start_matches("\r\n");
    }
}

/// `GET /ready` on `<ip>:<port>` answers 200 with body `OK`.
pub async fn ready(ip: Ipv4Addr, port: u16, timeout: Duration) -> Result<(), ProbeError> {
    let target = SocketAddrV4::new(ip, port);
    within(timeout, async {
        let mut stream = TcpStream::connect(target).await.map_err(|e| format!("connect: {e}"))?;
        let request = format!("GET /ready HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\nUser-Agent: unbounded-localdns-supervisor\r\n\r\n");
        stream.write_all(request.as_bytes()).await.map_err(|e| format!("send: {e}"))?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.map_err(|e| format!("read: {e}"))?;
        let body = body_of_ok_response(&raw)?;
        if body.trim() == "OK" { Ok(()) } else { Err(format!("body {body:?}, not \"OK\"")) }
    })
    .await
    .map_err(|reason| ProbeError::Ready { target, reason })
}

/// A UDP query for `name` (type A) to `<ip>:53` answers with rcode NOERROR.
pub async fn dns(ip: Ipv4Addr, name: &str, timeout: Duration) -> Result<(), ProbeError> {
    let target = SocketAddrV4::new(ip, DNS_PORT);
    within(timeout, async {
        let mut query = Message::query();
        query.metadata.recursion_desired = true;
        let fqdn = Name::from_ascii(name).map_err(|e| format!("bad name: {e}"))?;
        query.add_query(Query::query(fqdn, RecordType::A));
        let bytes = query.to_vec().map_err(|e| format!("encode: {e}"))?;
        let socket = UdpSocket::bind(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)))
            .await
            .map_err(|e| format!("bind: {e}"))?;
        socket
            .connect(target)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        socket.send(&bytes).await.map_err(|e| format!("send: {e}"))?;
        let mut buf = vec![0u8; 4096];
        loop {
            let n = socket.recv(&mut buf).await.map_err(|e| format!("receive: {e}"))?;
            let Ok(answer) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            if answer.metadata.id != query.metadata.id
                || answer.metadata.message_type != MessageType::Response
            {
                continue;
            }
            return match answer.metadata.response_code {
                ResponseCode::NoError => Ok(()),
                code => Err(format!("rcode {code}")),
            };
        }
    })
    .await
    .map_err(|reason| ProbeError::Dns {
        target,
        name: name.to_owned(),
        reason,
    })
}

/// Both probes on both listeners; every failure is returned.
pub async fn check(settings: &Settings) -> Result<(), Vec<ProbeError>> {
    let timeout = settings.probe_timeout();
    let [node, cluster] = settings.listeners();
    let (a, b, c, d) = tokio::join!(
        ready(node, settings.ready_port, timeout),
        ready(cluster, settings.ready_port, timeout),
        dns(node, &settings.health_name, timeout),
        dns(cluster, &settings.health_name, timeout),
    );
    let errors: Vec<ProbeError> = [a, b, c, d].into_iter().filter_map(Result::err).collect();
    if errors.is_empty() { Ok(()) } else { Err(errors) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_ok_response_gives_its_body() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nOK";
        assert_eq!(body_of_ok_response(raw).unwrap(), "OK");
    }

    #[test]
    fn chunked_response_is_decoded() {
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nOK\r\n0\r\n\r\n";
        assert_eq!(body_of_ok_response(raw).unwrap(), "OK");
    }

    #[test]
    fn non_200_status_is_an_error_naming_it() {
        let raw = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nnope";
        assert!(body_of_ok_response(raw).unwrap_err().contains("503"));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn nothing_listening_fails_both_probes_quickly() {
        // 127.0.0.1:1 and :53 on loopback of this test host: port 1 is never served; a DNS query to
        // a closed UDP port gets ICMP port-unreachable, or no answer within the timeout.
        let err = ready(Ipv4Addr::LOCALHOST, 1, Duration::from_millis(500))
            .await
            .unwrap_err();
        assert!(matches!(err, ProbeError::Ready { .. }), "{err}");
        let started = std::time::Instant::now();
        let _ = dns(
            Ipv4Addr::new(127, 0, 0, 2),
            "health-check.localdns.local",
            Duration::from_millis(300),
        )
        .await;
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
