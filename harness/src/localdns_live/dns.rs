//! What a live LocalDNS answers: one A query over UDP or TCP ([`query`]), and its metrics
//! endpoint ([`metrics`], [`metric_sum`]), both from the calling thread's namespace.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

use hickory_proto::ProtoError;
use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use hickory_proto::serialize::binary::DecodeError;

use super::error::LiveError;

/// A DNS answer: rcode and the A records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub rcode: ResponseCode,
    pub a: Vec<Ipv4Addr>,
}

/// Why a query got no answer.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error("the query for {name:?}: {source}")]
    Build {
        name: String,
        #[source]
        source: ProtoError,
    },
    #[error("{step} {server}: {source}")]
    Io {
        step: &'static str,
        server: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("the answer from {server}: {source}")]
    Parse {
        server: SocketAddr,
        #[source]
        source: DecodeError,
    },
}

/// One A query for `name` to `server:53` over UDP (or TCP), from the calling thread's namespace;
/// 2 s to answer.
pub fn query(server: Ipv4Addr, name: &str, tcp: bool) -> Result<Answer, QueryError> {
    let at = SocketAddr::from((server, 53));
    let build = |source| QueryError::Build {
        name: name.to_owned(),
        source,
    };
    let io = |step| {
        move |source| QueryError::Io {
            step,
            server: at,
            source,
        }
    };
    let mut msg = Message::query();
    msg.metadata.recursion_desired = true;
    msg.add_query(Query::query(
        Name::from_ascii(name).map_err(build)?,
        RecordType::A,
    ));
    let bytes = msg.to_vec().map_err(build)?;
    let timeout = Duration::from_secs(2);
    let raw = if tcp {
        let mut stream = TcpStream::connect_timeout(&at, timeout).map_err(io("connect to"))?;
        stream
            .set_read_timeout(Some(timeout))
            .map_err(io("set a timeout on"))?;
        let mut framed = (bytes.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&bytes);
        stream.write_all(&framed).map_err(io("send to"))?;
        let mut len = [0u8; 2];
        stream.read_exact(&mut len).map_err(io("read from"))?;
        let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
        stream.read_exact(&mut buf).map_err(io("read from"))?;
        buf
    } else {
        let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).map_err(io("bind a socket for"))?;
        socket
            .set_read_timeout(Some(timeout))
            .map_err(io("set a timeout on"))?;
        socket.send_to(&bytes, at).map_err(io("send to"))?;
        let mut buf = vec![0u8; 4096];
        let n = socket.recv(&mut buf).map_err(io("receive from"))?;
        buf.truncate(n);
        buf
    };
    let answer = Message::from_vec(&raw).map_err(|source| QueryError::Parse { server: at, source })?;
    let a = answer
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(a.0),
            _ => None,
        })
        .collect();
    Ok(Answer {
        rcode: answer.metadata.response_code,
        a,
    })
}

/// `GET http://<addr>/metrics`, from the calling thread's namespace: the whole response.
pub fn metrics(addr: &str) -> Result<String, LiveError> {
    let failed = |source| LiveError::Metrics {
        addr: addr.to_owned(),
        source,
    };
    let mut stream = TcpStream::connect(addr).map_err(failed)?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(failed)?;
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .map_err(failed)?;
    let mut text = String::new();
    stream.read_to_string(&mut text).map_err(failed)?;
    Ok(text)
}

/// The sum of every sample of `metric` (all label sets).
pub fn metric_sum(text: &str, metric: &str) -> f64 {
    metric_sum_with_label(text, metric, "")
}

/// The sum of the samples of `metric` whose label set contains `label` (such as `type="A"`).
pub fn metric_sum_with_label(text: &str, metric: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.split(['{', ' ']).next() == Some(metric))
        .filter(|l| l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_sums_add_the_samples_of_one_metric_with_the_label() {
        let text = "# HELP coredns_dns_requests_total x\n\
                    coredns_dns_requests_total{type=\"A\"} 3\n\
                    coredns_dns_requests_total{type=\"AAAA\"} 2\n\
                    coredns_dns_requests_total_other 7\n\
                    coredns_cache_hits_total 4\n";
        assert_eq!(metric_sum(text, "coredns_dns_requests_total"), 5.0);
        assert_eq!(
            metric_sum_with_label(text, "coredns_dns_requests_total", "type=\"A\""),
            3.0
        );
        assert_eq!(metric_sum(text, "coredns_cache_hits_total"), 4.0);
    }
}
