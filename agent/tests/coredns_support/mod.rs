//! Shared by the tests that run the real CoreDNS on this host: finding the binary the lab builds,
//! the LocalDNS goal of a `tests/render/<case>.json` case, and a DNS query with a deadline.

#![allow(dead_code)]

use std::net::{Ipv4Addr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use agent::goal::{HostFacts, LocalDnsGoal, OptionalFacts};

/// The CoreDNS binary: `$LOCALDNS_TEST_COREDNS`, else the newest one the lab built under
/// `$LAB_CACHE_DIR/coredns` (default `~/.cache/unbounded-lab`). Panics naming what is missing.
pub fn find_coredns() -> PathBuf {
    if let Some(p) = std::env::var_os("LOCALDNS_TEST_COREDNS") {
        return p.into();
    }
    let cache = std::env::var_os("LAB_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/unbounded-lab"));
    let mut found = Vec::new();
    for key in std::fs::read_dir(cache.join("coredns"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let versions = key.path().join("offline/coredns");
        for v in std::fs::read_dir(&versions).into_iter().flatten().flatten() {
            let bin = v.path().join("bin/linux/amd64/coredns");
            if bin.is_file() {
                found.push(bin);
            }
        }
    }
    found.sort();
    found.pop().unwrap_or_else(|| {
        panic!(
            "no CoreDNS binary under {}/coredns: build it with `harness images build` \
             (or set LOCALDNS_TEST_COREDNS)",
            cache.display()
        )
    })
}

/// The LocalDNS goal of the render case `tests/render/<case>.json` (config and host facts).
pub fn local_dns_goal(case: &str) -> LocalDnsGoal {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/render/{case}.json"));
    let c: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let config = agent::validate::parse_value(c["config"].clone()).unwrap();
    let optional: OptionalFacts =
        serde_json::from_value(c.get("host_facts").cloned().unwrap_or_default()).unwrap_or_default();
    let facts = HostFacts {
        host_resolv_conf: c["host_resolv_conf"].as_str().unwrap().into(),
        optional,
    };
    let goal = agent::goal::resolve(&config, &facts, agent::names::Slot::Kube1).unwrap();
    goal.local_dns.expect("the render case has LocalDNS on")
}

/// Kills and reaps the child when dropped.
pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The rcode of an A query for `name` to `server:53` over UDP, answered within `timeout`.
pub fn dns_rcode(server: Ipv4Addr, name: &str, timeout: Duration) -> std::io::Result<u8> {
    let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    let s = UdpSocket::bind("0.0.0.0:0")?;
    // Connected, so that a closed port reads as an error at once (ICMP port unreachable).
    s.connect((server, 53))?;
    s.set_read_timeout(Some(timeout))?;
    s.send(&q)?;
    let mut buf = [0u8; 512];
    let n = s.recv(&mut buf)?;
    if n < 12 || buf[..2] != [0x12, 0x34] {
        return Err(std::io::Error::other("not an answer to our query"));
    }
    Ok(buf[3] & 0x0f)
}
