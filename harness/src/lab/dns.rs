//! The lab's upstream DNS data: records the tests set at run time, the answer
//! to each query, per-name query counts and a failure switch.
//!
//! The server ([`super::dns_server`]) is authoritative for every name: a name
//! with records of the asked type gets them; a known name without that type
//! gets an empty NOERROR; an unknown name gets NXDOMAIN. Negative answers
//! carry an SOA (owner: the name's last label) whose minimum is
//! [`DnsControl::set_negative_ttl`] (default 5 s), so caches keep them briefly.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};

use hickory_proto::op::{Edns, Message, MessageType, Metadata, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, CNAME, SOA, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType};

use super::error::LabError;

/// How the server treats every query while the switch is set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DnsFailure {
    /// Answer normally.
    #[default]
    None,
    /// Answer every query with SERVFAIL.
    ServFail,
    /// Answer every query with REFUSED.
    Refused,
    /// Do not answer at all (the client times out).
    Drop,
}

/// One query the server received, and what it did with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsQuery {
    /// The name asked for, lower case, with the final dot (`web.lab.test.`).
    pub name: String,
    pub record_type: String,
    pub from: SocketAddr,
    /// The lab address the query arrived at (the upstream or the second upstream).
    pub server: SocketAddr,
    pub protocol: &'static str,
    /// `NoError`, `NXDomain`, `ServFail`, `Refused` or `dropped`.
    pub outcome: String,
}

#[derive(Default)]
struct DnsState {
    records: BTreeMap<String, Vec<Record>>,
    failure: DnsFailure,
    negative_ttl: u32,
    counts: HashMap<String, u64>,
    log: Vec<DnsQuery>,
    log_file: Option<File>,
}

/// The handle tests use to control the lab's DNS server (cheap to clone).
#[derive(Clone)]
pub struct DnsControl {
    state: Arc<Mutex<DnsState>>,
}

/// Parses a name as typed (`web.lab.test` or `web.lab.test.`) into a lower-case FQDN.
pub fn parse_name(name: &str) -> Result<Name, LabError> {
    let bad = |reason: String| LabError::BadDnsName {
        name: name.to_string(),
        reason,
    };
    if name.is_empty() || name.contains(|c: char| c.is_whitespace()) {
        return Err(bad("empty or contains whitespace".into()));
    }
    let mut parsed = Name::from_ascii(name).map_err(|e| bad(e.to_string()))?;
    parsed.set_fqdn(true);
    Ok(parsed.to_lowercase())
}

fn key(name: &Name) -> String {
    let mut name = name.to_lowercase();
    name.set_fqdn(true);
    name.to_ascii()
}

impl DnsControl {
    /// A server state with no records, answering normally; queries are also
    /// appended to `log_file` (one line each) when given.
    pub fn new(log_file: Option<File>) -> DnsControl {
        DnsControl {
            state: Arc::new(Mutex::new(DnsState {
                negative_ttl: 5,
                log_file,
                ..DnsState::default()
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, DnsState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Replaces the records of `rtype` at `name` with `data` (empty removes them).
    pub fn set_records(
        &self,
        name: &str,
        ttl: u32,
        rtype: RecordType,
        data: Vec<RData>,
    ) -> Result<(), LabError> {
        let name = parse_name(name)?;
        let mut state = self.lock();
        let records = state.records.entry(key(&name)).or_default();
        records.retain(|r| r.record_type() != rtype);
        records.extend(data.into_iter().map(|d| Record::from_rdata(name.clone(), ttl, d)));
        if records.is_empty() {
            state.records.remove(&key(&name));
        }
        Ok(())
    }

    /// Sets the A records of `name` (replacing earlier ones) with `ttl` seconds.
    pub fn set_a(&self, name: &str, ips: &[Ipv4Addr], ttl: u32) -> Result<(), LabError> {
        let data = ips.iter().map(|ip| RData::A(A(*ip))).collect();
        self.set_records(name, ttl, RecordType::A, data)
    }

    /// Sets one TXT record at `name`.
    pub fn set_txt(&self, name: &str, text: &str, ttl: u32) -> Result<(), LabError> {
        let data = vec![RData::TXT(TXT::new(vec![text.to_string()]))];
        self.set_records(name, ttl, RecordType::TXT, data)
    }

    /// Makes `name` an alias of `target`.
    pub fn set_cname(&self, name: &str, target: &str, ttl: u32) -> Result<(), LabError> {
        let data = vec![RData::CNAME(CNAME(parse_name(target)?))];
        self.set_records(name, ttl, RecordType::CNAME, data)
    }

    /// Removes every record at `name` (it then answers NXDOMAIN).
    pub fn remove(&self, name: &str) -> Result<(), LabError> {
        let name = parse_name(name)?;
        self.lock().records.remove(&key(&name));
        Ok(())
    }

    /// Sets how every following query is treated.
    pub fn set_failure(&self, failure: DnsFailure) {
        self.lock().failure = failure;
    }

    /// The SOA minimum of negative answers, in seconds.
    pub fn set_negative_ttl(&self, ttl: u32) {
        self.lock().negative_ttl = ttl;
    }

    /// How many queries (any type, any outcome) arrived for `name` since the last reset.
    pub fn query_count(&self, name: &str) -> Result<u64, LabError> {
        let name = parse_name(name)?;
        Ok(self.lock().counts.get(&key(&name)).copied().unwrap_or(0))
    }

    /// Every query since the last reset, oldest first.
    pub fn queries(&self) -> Vec<DnsQuery> {
        self.lock().log.clone()
    }

    /// Forgets the counts and the query list (the log file keeps everything).
    pub fn reset_counts(&self) {
        let mut state = self.lock();
        state.counts.clear();
        state.log.clear();
    }

    /// Records the query (from `from`, arrived at `server`) and computes the reply; `None` means
    /// stay silent.
    pub fn handle(
        &self,
        request: &Message,
        from: SocketAddr,
        server: SocketAddr,
        protocol: &'static str,
    ) -> Option<Message> {
        let mut state = self.lock();
        let reply = answer(&state, request);
        let outcome = match &reply {
            Some(m) => format!("{:?}", m.metadata.response_code),
            None => "dropped".to_string(),
        };
        for query in &request.queries {
            let entry = DnsQuery {
                name: key(query.name()),
                record_type: query.query_type().to_string(),
                from,
                server,
                protocol,
                outcome: outcome.clone(),
            };
            *state.counts.entry(entry.name.clone()).or_default() += 1;
            if let Some(file) = &mut state.log_file {
                let _ = writeln!(
                    file,
                    "{} {} {} from {} to {} over {}",
                    entry.name, entry.record_type, entry.outcome, entry.from, entry.server, entry.protocol
                );
            }
            state.log.push(entry);
        }
        reply
    }
}

fn soa_for(name: &Name, negative_ttl: u32) -> Record {
    let zone = name.trim_to(1);
    let ns = Name::from_ascii("ns.lab.").expect("static name");
    let host = Name::from_ascii("hostmaster.lab.").expect("static name");
    let soa = SOA::new(ns, host, 1, 3600, 600, 86400, negative_ttl);
    Record::from_rdata(zone, negative_ttl, RData::SOA(soa))
}

/// The reply to `request` from `state` alone (no I/O); `None` means no reply.
fn answer(state: &DnsState, request: &Message) -> Option<Message> {
    let mut reply = Message::new(
        request.metadata.id,
        MessageType::Response,
        request.metadata.op_code,
    );
    reply.metadata = Metadata::response_from_request(&request.metadata);
    reply.metadata.recursion_available = true;
    reply.queries = request.queries.clone();
    if let Some(edns) = &request.edns {
        let mut ours = Edns::new();
        ours.set_max_payload(edns.max_payload().max(512));
        reply.set_edns(ours);
    }
    let code = match state.failure {
        DnsFailure::Drop => return None,
        DnsFailure::ServFail => Some(ResponseCode::ServFail),
        DnsFailure::Refused => Some(ResponseCode::Refused),
        DnsFailure::None if request.metadata.op_code != OpCode::Query => Some(ResponseCode::NotImp),
        DnsFailure::None if request.queries.len() != 1 => Some(ResponseCode::FormErr),
        DnsFailure::None => None,
    };
    if let Some(code) = code {
        reply.metadata.response_code = code;
        return Some(reply);
    }
    let query = &request.queries[0];
    reply.metadata.authoritative = true;
    let mut name = query.name().clone();
    // Follow CNAMEs within our own records (a few hops at most).
    for _ in 0..8 {
        let Some(records) = state.records.get(&key(&name)) else {
            if reply.answers.is_empty() {
                reply.metadata.response_code = ResponseCode::NXDomain;
            }
            reply.add_authority(soa_for(&name, state.negative_ttl));
            return Some(reply);
        };
        let matching: Vec<Record> = records
            .iter()
            .filter(|r| r.record_type() == query.query_type() || query.query_type() == RecordType::ANY)
            .cloned()
            .collect();
        if !matching.is_empty() {
            reply.add_answers(matching);
            return Some(reply);
        }
        match records.iter().find(|r| r.record_type() == RecordType::CNAME) {
            Some(cname) => {
                reply.add_answer(cname.clone());
                let RData::CNAME(CNAME(target)) = &cname.data else {
                    unreachable!("a CNAME record holds CNAME data")
                };
                name = target.clone();
            }
            None => {
                reply.add_authority(soa_for(&name, state.negative_ttl));
                return Some(reply);
            }
        }
    }
    Some(reply)
}

#[cfg(test)]
mod tests {
    use hickory_proto::op::Query;

    use super::*;

    fn ask(dns: &DnsControl, name: &str, rtype: RecordType) -> Option<Message> {
        let mut request = Message::query();
        request.add_query(Query::query(Name::from_ascii(name).unwrap(), rtype));
        dns.handle(
            &request,
            "192.168.101.10:5353".parse().unwrap(),
            "192.168.100.1:53".parse().unwrap(),
            "udp",
        )
    }

    #[test]
    fn known_name_answers_with_its_records_and_is_counted() {
        let dns = DnsControl::new(None);
        dns.set_a("Web.Lab.Test", &[Ipv4Addr::new(10, 1, 2, 3)], 30)
            .unwrap();
        let reply = ask(&dns, "web.lab.test.", RecordType::A).unwrap();
        assert_eq!(reply.metadata.response_code, ResponseCode::NoError);
        assert_eq!(reply.answers.len(), 1);
        assert_eq!(reply.answers[0].data, RData::A(A(Ipv4Addr::new(10, 1, 2, 3))));
        assert_eq!(reply.answers[0].ttl, 30);
        assert_eq!(dns.query_count("web.lab.test").unwrap(), 1);
        assert_eq!(dns.queries()[0].outcome, "NoError");
    }

    #[test]
    fn unknown_name_is_nxdomain_and_known_name_without_the_type_is_empty() {
        let dns = DnsControl::new(None);
        dns.set_a("web.lab.test", &[Ipv4Addr::LOCALHOST], 30).unwrap();
        let nx = ask(&dns, "nope.lab.test.", RecordType::A).unwrap();
        assert_eq!(nx.metadata.response_code, ResponseCode::NXDomain);
        assert_eq!(nx.authorities[0].record_type(), RecordType::SOA);
        let nodata = ask(&dns, "web.lab.test.", RecordType::AAAA).unwrap();
        assert_eq!(nodata.metadata.response_code, ResponseCode::NoError);
        assert!(nodata.answers.is_empty());
    }

    #[test]
    fn removed_name_answers_nxdomain() {
        let dns = DnsControl::new(None);
        dns.set_a("web.lab.test", &[Ipv4Addr::LOCALHOST], 30).unwrap();
        dns.remove("web.lab.test.").unwrap();
        let reply = ask(&dns, "web.lab.test.", RecordType::A).unwrap();
        assert_eq!(reply.metadata.response_code, ResponseCode::NXDomain);
    }

    #[test]
    fn cname_is_followed_within_the_lab_records() {
        let dns = DnsControl::new(None);
        dns.set_cname("alias.lab.test", "web.lab.test", 30).unwrap();
        dns.set_a("web.lab.test", &[Ipv4Addr::LOCALHOST], 30).unwrap();
        let reply = ask(&dns, "alias.lab.test.", RecordType::A).unwrap();
        let types: Vec<RecordType> = reply.answers.iter().map(|r| r.record_type()).collect();
        assert_eq!(types, [RecordType::CNAME, RecordType::A]);
    }

    #[test]
    fn failure_switch_servfails_or_drops_and_still_counts() {
        let dns = DnsControl::new(None);
        dns.set_a("web.lab.test", &[Ipv4Addr::LOCALHOST], 30).unwrap();
        dns.set_failure(DnsFailure::ServFail);
        let reply = ask(&dns, "web.lab.test.", RecordType::A).unwrap();
        assert_eq!(reply.metadata.response_code, ResponseCode::ServFail);
        dns.set_failure(DnsFailure::Drop);
        assert!(ask(&dns, "web.lab.test.", RecordType::A).is_none());
        assert_eq!(dns.query_count("web.lab.test").unwrap(), 2);
        dns.set_failure(DnsFailure::None);
        assert_eq!(
            ask(&dns, "web.lab.test.", RecordType::A).unwrap().answers.len(),
            1
        );
        dns.reset_counts();
        assert_eq!(dns.query_count("web.lab.test").unwrap(), 0);
    }

    #[test]
    fn names_with_spaces_are_rejected_naming_the_name() {
        let err = DnsControl::new(None).set_a("bad name", &[], 1).unwrap_err();
        assert!(err.to_string().contains("\"bad name\""), "{err}");
    }
}
