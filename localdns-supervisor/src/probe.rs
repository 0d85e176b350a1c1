//! Health probes of one listener: `GET http://<L>:<ready port>/ready` answers 200 with body `OK`
//! (hyper's HTTP/1 client on a direct TCP connection: it never consults a proxy) and a UDP DNS
//! query answered NOERROR.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper::{Request, StatusCode, header};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::net::UdpSocket;

use super::Settings;
use super::settings::DNS_PORT;

/// The most of a `/ready` body that is read (CoreDNS answers `OK`).
const READY_BODY_LIMIT: usize = 4096;

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

/// `GET http://<target><path>` on a new direct connection (no proxy; no pooled connection
/// outlives it): the body, at most `limit` bytes of it, when the status is 200; else why not.
pub async fn get_ok(target: SocketAddrV4, path: &str, limit: usize) -> Result<Bytes, String> {
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build_http();
    let request = Request::get(format!("http://{target}{path}"))
        .header(header::USER_AGENT, "unbounded-localdns-supervisor")
        .body(Empty::new())
        .map_err(|e| format!("request: {e}"))?;
    let response = client
        .request(request)
        .await
        .map_err(|e| node_base::error_chain::chain(&e))?;
    let status = response.status();
    if status != StatusCode::OK {
        return Err(format!("status {status}, not 200"));
    }
    Ok(Limited::new(response.into_body(), limit)
        .collect()
        .await
        .map_err(|e| format!("body: {}", node_base::error_chain::chain(e.as_ref())))?
        .to_bytes())
}

/// `GET /ready` on `<ip>:<port>` answers 200 with body `OK`, all within `timeout`. One new
/// connection per probe (no pooled connection outlives it).
pub async fn ready(ip: Ipv4Addr, port: u16, timeout: Duration) -> Result<(), ProbeError> {
    let target = SocketAddrV4::new(ip, port);
    within(timeout, async {
        let body = get_ok(target, "/ready", READY_BODY_LIMIT).await?;
        let body = String::from_utf8_lossy(&body);
        if body.trim() == "OK" {
            Ok(())
        } else {
            Err(format!("body {body:?}, not \"OK\""))
        }
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
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;
    use tokio::task::JoinHandle;

    use super::*;

    /// A real HTTP server on 127.0.0.1: one connection, answered with `response` byte for byte.
    /// Gives its port and the request it read (up to the blank line).
    async fn answering(response: &'static [u8]) -> (u16, JoinHandle<String>) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.ends_with(b"\r\n\r\n") {
                let n = stream.read(&mut buf).await.unwrap();
                assert!(n > 0, "the client closed before a whole request");
                request.extend_from_slice(&buf[..n]);
            }
            stream.write_all(response).await.unwrap();
            stream.shutdown().await.unwrap();
            String::from_utf8(request).unwrap()
        });
        (port, server)
    }

    /// `ready` against a server answering `response`: the result, the request it sent, the port.
    async fn probe(response: &'static [u8]) -> (Result<(), ProbeError>, String, u16) {
        let (port, server) = answering(response).await;
        let result = ready(Ipv4Addr::LOCALHOST, port, Duration::from_secs(5)).await;
        (result, server.await.unwrap(), port)
    }

    #[tokio::test(flavor = "current_thread")]
    async fn ok_answer_passes_and_the_request_is_get_ready() {
        let (result, request, port) =
            probe(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nOK").await;
        result.unwrap();
        let mut lines = request.lines();
        assert_eq!(lines.next(), Some("GET /ready HTTP/1.1"), "{request}");
        let host = format!("host: 127.0.0.1:{port}");
        assert!(lines.any(|l| l.eq_ignore_ascii_case(&host)), "{request}");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn chunked_ok_answer_passes() {
        let (result, ..) =
            probe(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nO\r\n1\r\nK\r\n0\r\n\r\n")
                .await;
        result.unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn non_200_status_fails_naming_it() {
        let (result, ..) = probe(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 2\r\n\r\nOK").await;
        let err = result.unwrap_err();
        assert!(
            matches!(err, ProbeError::Ready { .. }) && err.to_string().contains("503"),
            "{err}"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn other_body_than_ok_fails_naming_it() {
        let (result, ..) = probe(b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nnot yet\n").await;
        let err = result.unwrap_err().to_string();
        assert!(err.contains("not yet"), "{err}");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn malformed_answer_fails() {
        let (result, ..) = probe(b"SSH-2.0-OpenSSH_9.2\r\n\r\n").await;
        assert!(matches!(result, Err(ProbeError::Ready { .. })), "{result:?}");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn silent_server_fails_within_the_timeout() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let started = std::time::Instant::now();
        let err = ready(Ipv4Addr::LOCALHOST, port, Duration::from_millis(300))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("no answer within"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(2));
        drop(listener);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_probe_that_timed_out_closes_its_connection() {
        // The server reads the request, never answers, and waits for the client to hang up.
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        });
        let err = ready(Ipv4Addr::LOCALHOST, port, Duration::from_millis(300))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("no answer within"), "{err}");
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("the probe's connection is still open 5 s after it gave up")
            .unwrap();
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
