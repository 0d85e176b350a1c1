//! The cluster DNS answering, asked from inside the lab namespace: the path a node's queries to
//! the `kube-dns` ClusterIP take (with a Kind cluster: the lab's route to the Kind node, its
//! kube-proxy's DNAT, a CoreDNS pod). A resumed node waits for it, as a restored Kind cluster's
//! CoreDNS pods start again only after its API server answers.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};

use crate::netns;
use crate::wait::{Attempt, WaitTimeout, wait_until};

/// The name asked: the `kubernetes` Service, which every cluster has.
pub const PROBE_NAME: &str = "kubernetes.default.svc.cluster.local.";

/// One A query for [`PROBE_NAME`] to `server:53` over UDP from inside namespace `ns` (one second
/// limit); the addresses of a NOERROR answer, or what went wrong.
pub fn ask_in(ns: &str, server: Ipv4Addr) -> Result<Vec<Ipv4Addr>, String> {
    let mut query = Message::query();
    query.metadata.recursion_desired = true;
    query.add_query(Query::query(
        Name::from_ascii(PROBE_NAME).map_err(|e| e.to_string())?,
        RecordType::A,
    ));
    let bytes = query.to_vec().map_err(|e| e.to_string())?;
    let to = SocketAddr::from((server, 53));
    let reply = netns::in_netns(ns, move || {
        let socket = UdpSocket::bind("0.0.0.0:0")?;
        socket.set_read_timeout(Some(Duration::from_secs(1)))?;
        socket.send_to(&bytes, to)?;
        let mut buf = vec![0u8; 4096];
        let (len, _) = socket.recv_from(&mut buf)?;
        buf.truncate(len);
        Ok(buf)
    })
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("asking {to} for {PROBE_NAME}: {e}"))?;
    let reply = Message::from_vec(&reply).map_err(|e| format!("{to} answered garbage: {e}"))?;
    if reply.metadata.response_code != ResponseCode::NoError {
        return Err(format!(
            "{to} answered {PROBE_NAME} with {:?}",
            reply.metadata.response_code
        ));
    }
    let addresses: Vec<Ipv4Addr> = reply
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(a.0),
            _ => None,
        })
        .collect();
    if addresses.is_empty() {
        return Err(format!("{to} answered {PROBE_NAME} with no address"));
    }
    Ok(addresses)
}

/// Waits until `server` answers [`PROBE_NAME`] from inside namespace `ns` (see [`ask_in`]);
/// returns how long that took. The timeout error names the last failure.
pub fn wait_answers_in(ns: &str, server: Ipv4Addr, timeout: Duration) -> Result<Duration, WaitTimeout> {
    let started = Instant::now();
    wait_until(
        format!("the cluster DNS {server}"),
        timeout,
        format!("an answer for {PROBE_NAME} from the lab namespace {ns}"),
        || match ask_in(ns, server) {
            Ok(_) => Attempt::Ready(()),
            Err(why) => Attempt::Retry(why),
        },
    )?;
    Ok(started.elapsed())
}
