//! `Lab::block_artifact_server` on this host's kernel: a client on the lab bridge (a veth in a
//! namespace of its own, standing in for a VM) gets "No route to host" from the artifact
//! server while blocked, and the server logs nothing; a client that is not blocked, and the
//! same client once unblocked, reach it; blocking twice keeps one rule, unblocking the last
//! address removes the table, and nothing is left after the lab. Needs root; no VM.

use std::net::Ipv4Addr;
use std::process::Command;

use agent::exec;
use harness::deploy::offline::PROBE_PATH;
use harness::lab::{Lab, LabSpec};
use harness::netns;

/// A network namespace with one veth on the lab's bridge at `ip` (deleted on drop).
struct Client {
    ns: String,
}

impl Client {
    fn attach(lab: &Lab, k: u8, ip: Ipv4Addr) -> Client {
        let ns = format!("offcl{}-{k}", std::process::id());
        let host_end = format!("offv{}-{k}", lab.number());
        let ip_cmd =
            |args: &[&str]| exec::run(Command::new("ip").args(args)).unwrap_or_else(|e| panic!("{e}"));
        ip_cmd(&["netns", "add", &ns]);
        let client = Client { ns: ns.clone() };
        let lab_ns = lab.name();
        ip_cmd(&[
            "-n", &lab_ns, "link", "add", &host_end, "type", "veth", "peer", "name", "eth0", "netns", &ns,
        ]);
        ip_cmd(&[
            "-n",
            &lab_ns,
            "link",
            "set",
            &host_end,
            "master",
            &lab.addrs().bridge(),
        ]);
        ip_cmd(&["-n", &lab_ns, "link", "set", &host_end, "up"]);
        ip_cmd(&["-n", &ns, "addr", "add", &format!("{ip}/24"), "dev", "eth0"]);
        ip_cmd(&["-n", &ns, "link", "set", "eth0", "up"]);
        client
    }

    /// `curl -v` to `url` from the client: (exit code, everything it printed).
    fn curl(&self, url: &str) -> (Option<i32>, String) {
        let out = exec::run_unchecked(netns::command_in(&self.ns, "curl").args([
            "-v",
            "--max-time",
            "10",
            "-o",
            "/dev/null",
            url,
        ]))
        .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), text)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = exec::run(Command::new("ip").args(["netns", "del", &self.ns]));
    }
}

fn reject_rules(lab: &Lab) -> Vec<String> {
    lab.artifact_server_block_rules()
        .unwrap()
        .lines()
        .filter(|l| l.contains("reject"))
        .map(|l| l.trim().to_string())
        .collect()
}

#[test]
fn a_blocked_client_gets_no_route_to_the_artifact_server_and_an_unblocked_one_gets_through() {
    let lab = Lab::start(LabSpec::for_test(
        "a_blocked_client_gets_no_route_to_the_artifact_server_and_an_unblocked_one_gets_through",
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let blocked_ip = lab.addrs().vm_ip(20).unwrap();
    let other_ip = lab.addrs().vm_ip(21).unwrap();
    let blocked = Client::attach(&lab, 0, blocked_ip);
    let other = Client::attach(&lab, 1, other_ip);
    let url = format!("{}{}", lab.addrs().http_url(), PROBE_PATH);

    lab.block_artifact_server(blocked_ip).unwrap();
    lab.block_artifact_server(blocked_ip).unwrap();
    assert_eq!(lab.artifact_server_blocked(), [blocked_ip]);
    let rules = reject_rules(&lab);
    assert_eq!(rules.len(), 1, "blocking twice must keep one rule: {rules:?}");
    assert!(rules[0].contains(&blocked_ip.to_string()), "{rules:?}");

    let (code, text) = blocked.curl(&url);
    assert_eq!(code, Some(7), "{text}");
    assert!(text.contains("No route to host"), "{text}");
    assert!(lab.http().requests().is_empty(), "{:?}", lab.http().requests());
    let listed = lab.artifact_server_block_rules().unwrap();
    assert!(
        listed.contains("counter packets") && !listed.contains("counter packets 0 "),
        "the reject rule did not count the refused connect:\n{listed}"
    );

    // Positive control: a client that is not blocked reaches the server and is logged.
    let (code, text) = other.curl(&url);
    assert_eq!(code, Some(0), "{text}");
    let from: Vec<_> = lab.http().requests().iter().map(|r| r.from.ip()).collect();
    assert_eq!(from, [std::net::IpAddr::V4(other_ip)]);

    lab.unblock_artifact_server(blocked_ip).unwrap();
    lab.unblock_artifact_server(blocked_ip).unwrap();
    assert!(lab.artifact_server_blocked().is_empty());
    assert_eq!(
        lab.artifact_server_block_rules().unwrap(),
        "",
        "the table outlived its last address"
    );
    let (code, text) = blocked.curl(&url);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(lab.http().request_count(), 2);

    lab.block_artifact_server(blocked_ip).unwrap();
    let name = lab.name();
    drop((blocked, other));
    lab.shutdown().unwrap();
    assert!(!netns::exists(&name));
}
