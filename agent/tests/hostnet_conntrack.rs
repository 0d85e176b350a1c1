//! The supervisor's `/ready` probes leave no conntrack entry, on this host's real kernel, in a fresh
//! network namespace: the listener addresses sit on `lo` (the `localdns` dummy link needs Debian's
//! kernel; the rules match addresses, not the link), conntrack is made active by a stateful table as
//! any firewall would, our table is applied from the rendered script, and the real probe
//! (`agent::supervisor::probe::ready`) asks a `/ready` server on each listener. A positive control
//! (the same server on a port our rules do not cover) proves conntrack tracks in the namespace.

mod hostnet_support;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::process::Command;
use std::time::Duration;

use agent::corefile::READY_PORT;
use agent::hostnet::nft;
use agent::supervisor::probe;
use hostnet_support::*;

/// A port no rule of ours covers.
const UNCOVERED_PORT: u16 = 8182;

/// Serves `HTTP/1.1 200 OK` with body `OK` (what CoreDNS's `ready` plugin answers) on `ip:port`,
/// one connection after another, from a thread (its socket is bound in the caller's namespace).
fn serve_ready(ip: Ipv4Addr, port: u16) {
    let listener = TcpListener::bind((ip, port)).unwrap_or_else(|e| panic!("bind {ip}:{port}: {e}"));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 1024];
            let _ = stream.read(&mut request);
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nOK");
        }
    });
}

/// Sets up the namespace: `lo` up with both listener addresses, conntrack active, our table.
fn namespace_with_our_table(notrack_replies: bool) {
    fresh_netns();
    run(Command::new("ip").args(["link", "set", "lo", "up"]));
    for ip in [NODE, CLUSTER] {
        run(Command::new("ip").args(["addr", "add", &format!("{ip}/32"), "dev", "lo"]));
    }
    run(Command::new("nft").args(["add table inet stateful"]));
    run(Command::new("nft")
        .args(["add chain inet stateful input { type filter hook input priority 0; policy accept; }"]));
    run(Command::new("nft").args(["add rule inet stateful input ct state established,related accept"]));
    nft::replace_table(&script(notrack_replies)).unwrap();
}

/// `conntrack -L` lines of this namespace that mention `port`.
fn entries_for_port(port: u16) -> Vec<String> {
    let out = Command::new("conntrack")
        .arg("-L")
        .output()
        .expect("the conntrack tool (Debian package conntrack) is needed by this test");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&format!("port={port} ")))
        .map(str::to_owned)
        .collect()
}

fn probe_both_listeners(port: u16) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for ip in [NODE, CLUSTER] {
        for _ in 0..3 {
            runtime
                .block_on(probe::ready(ip, port, Duration::from_secs(5)))
                .unwrap_or_else(|e| panic!("the probe of {ip}:{port} failed: {e}"));
        }
    }
}

fn ready_probes_leave_no_entry(notrack_replies: bool) {
    namespace_with_our_table(notrack_replies);
    for ip in [NODE, CLUSTER] {
        serve_ready(ip, READY_PORT);
        serve_ready(ip, UNCOVERED_PORT);
    }

    probe_both_listeners(UNCOVERED_PORT);
    let control = entries_for_port(UNCOVERED_PORT);
    assert!(
        control.len() >= 2,
        "positive control: probes to port {UNCOVERED_PORT} (no rule of ours) should be tracked, so that \
         zero entries below mean NOTRACK; conntrack listed:\n{}",
        control.join("\n")
    );

    probe_both_listeners(READY_PORT);
    let entries = entries_for_port(READY_PORT);
    assert!(
        entries.is_empty(),
        "NOTRACKReplies={notrack_replies}: the /ready probes left {} conntrack entries:\n{}\nrules:\n{}",
        entries.len(),
        entries.join("\n"),
        rules_text()
    );
}

#[test]
fn ready_probes_leave_no_conntrack_entry_with_reply_rules() {
    ready_probes_leave_no_entry(true);
}

#[test]
fn ready_probes_leave_no_conntrack_entry_without_reply_rules() {
    ready_probes_leave_no_entry(false);
}
