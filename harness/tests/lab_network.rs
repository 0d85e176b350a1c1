//! The lab network on this host's kernel: namespace, bridge, the DNS and HTTP
//! services reached from inside the namespace, teardown and the stale-lab sweep.
//! Needs root (network namespaces); no VM.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use harness::kind::cluster_dns_probe;
use harness::lab::{DnsFailure, Lab, LabSpec, owner};
use harness::netns;

fn start(test: &str) -> Lab {
    Lab::start(LabSpec::for_test(test)).unwrap_or_else(|e| panic!("starting a lab for {test}: {e}"))
}

/// Runs `argv` inside the lab's namespace and returns its stdout (fails on a non-zero exit).
fn run_in(lab: &Lab, argv: &[&str]) -> String {
    let mut cmd = lab.command(argv[0]);
    cmd.args(&argv[1..]);
    agent::exec::run_stdout(&mut cmd).unwrap_or_else(|e| panic!("{e}"))
}

fn dig(lab: &Lab, extra: &[&str], name: &str) -> String {
    let server = format!("@{}", lab.addrs().bridge_ip());
    let mut argv = vec!["dig", server.as_str(), name, "A", "+tries=1", "+time=2"];
    argv.extend_from_slice(extra);
    run_in(lab, &argv)
}

fn host_links() -> String {
    agent::exec::run_stdout(Command::new("ip").args(["-o", "link", "show"])).unwrap()
}

#[test]
fn lab_comes_up_with_its_bridge_address_inside_its_own_namespace() {
    let lab = start("lab_comes_up_with_its_bridge_address_inside_its_own_namespace");
    let n = lab.number();
    assert!(netns::list("lab-").contains(&format!("lab-{n}")));
    let addr = run_in(
        &lab,
        &["ip", "-o", "-4", "addr", "show", "dev", &format!("labbr{n}")],
    );
    assert!(addr.contains("192.168.100.1/24"), "{addr}");
    assert!(
        addr.contains("192.168.100.2/24"),
        "no second upstream DNS address: {addr}"
    );
    let link = run_in(&lab, &["ip", "-o", "link", "show", &format!("labbr{n}")]);
    assert!(
        link.contains(&format!("link/ether {} ", lab.addrs().bridge_mac())),
        "the bridge does not have every lab's MAC: {link}"
    );
    let lo = run_in(&lab, &["ip", "-o", "link", "show", "lo"]);
    assert!(lo.contains("UP"), "lo is not up: {lo}");
    assert!(
        !host_links().contains(&format!("labbr{n}")),
        "the bridge leaked into the host namespace"
    );
    let nic = lab.attach_vm().unwrap();
    assert_eq!(nic.tap, format!("labtap{n}-0"));
    assert_eq!(nic.ip, Ipv4Addr::new(192, 168, 100, 10));
    let tap = run_in(&lab, &["ip", "-o", "link", "show", &nic.tap]);
    assert!(tap.contains(&format!("master labbr{n}")), "{tap}");
    let link = run_in(&lab, &["ip", "-o", "link", "show", &format!("labbr{n}")]);
    assert!(
        link.contains(&format!("link/ether {} ", lab.addrs().bridge_mac())),
        "the bridge took the tap's MAC: {link}"
    );
    lab.shutdown().unwrap();
}

#[test]
fn dns_server_answers_test_records_inside_the_namespace_and_counts_queries() {
    let lab = start("dns_server_answers_test_records_inside_the_namespace_and_counts_queries");
    lab.dns()
        .set_a("web.lab.test", &[Ipv4Addr::new(10, 9, 8, 7)], 5)
        .unwrap();
    assert_eq!(dig(&lab, &["+short"], "web.lab.test").trim(), "10.9.8.7");
    assert_eq!(dig(&lab, &["+short", "+tcp"], "web.lab.test").trim(), "10.9.8.7");
    assert_eq!(lab.dns().query_count("web.lab.test").unwrap(), 2);
    let protocols: Vec<&str> = lab.dns().queries().iter().map(|q| q.protocol).collect::<Vec<_>>();
    assert_eq!(protocols, ["udp", "tcp"]);

    // The same server on the second upstream address, which the log tells apart.
    let second = format!("@{}", lab.addrs().second_dns_ip());
    for extra in ["+notcp", "+tcp"] {
        let answer = run_in(
            &lab,
            &["dig", &second, "web.lab.test", "A", "+short", "+tries=1", extra],
        );
        assert_eq!(answer.trim(), "10.9.8.7", "{extra}");
    }
    let servers: Vec<String> = lab.dns().queries().iter().map(|q| q.server.to_string()).collect();
    assert_eq!(
        servers,
        [
            "192.168.100.1:53",
            "192.168.100.1:53",
            "192.168.100.2:53",
            "192.168.100.2:53"
        ]
    );
    lab.dns().reset_counts();
    assert_eq!(dig(&lab, &["+short"], "web.lab.test").trim(), "10.9.8.7");
    assert_eq!(dig(&lab, &["+short", "+tcp"], "web.lab.test").trim(), "10.9.8.7");

    let nx = dig(&lab, &[], "missing.lab.test");
    assert!(nx.contains("status: NXDOMAIN"), "{nx}");
    lab.dns().set_failure(DnsFailure::ServFail);
    let failed = dig(&lab, &[], "web.lab.test");
    assert!(failed.contains("status: SERVFAIL"), "{failed}");
    lab.dns().set_failure(DnsFailure::None);
    lab.dns().remove("web.lab.test").unwrap();
    let removed = dig(&lab, &[], "web.lab.test");
    assert!(removed.contains("status: NXDOMAIN"), "{removed}");
    assert_eq!(lab.dns().query_count("web.lab.test").unwrap(), 4);

    let log = std::fs::read_to_string(lab.log_dir().join("dns-queries.log")).unwrap();
    assert!(log.contains("web.lab.test. A NoError"), "{log}");
    assert!(log.contains("to 192.168.100.2:53 over tcp"), "{log}");
    lab.shutdown().unwrap();
}

/// The probe a resumed node waits on (`harness::kind::cluster_dns_probe`), pointed at the lab's
/// DNS server: it reads the addresses of a NOERROR answer, names a SERVFAIL, and its wait stops
/// with the last failure when the server never answers.
#[test]
fn cluster_dns_probe_reads_an_answer_and_names_a_failure_from_inside_the_namespace() {
    let lab = start("cluster_dns_probe_reads_an_answer_and_names_a_failure_from_inside_the_namespace");
    let server = lab.addrs().bridge_ip();
    let ns = lab.name();
    let missing = cluster_dns_probe::ask_in(&ns, server).unwrap_err();
    assert!(missing.contains("NXDomain"), "{missing}");
    lab.dns()
        .set_a(cluster_dns_probe::PROBE_NAME, &[Ipv4Addr::new(10, 96, 0, 1)], 5)
        .unwrap();
    assert_eq!(
        cluster_dns_probe::ask_in(&ns, server).unwrap(),
        [Ipv4Addr::new(10, 96, 0, 1)]
    );
    assert!(cluster_dns_probe::wait_answers_in(&ns, server, Duration::from_secs(5)).is_ok());
    lab.dns().set_failure(DnsFailure::ServFail);
    let failed = cluster_dns_probe::ask_in(&ns, server).unwrap_err();
    assert!(failed.contains("ServFail"), "{failed}");
    lab.dns().set_failure(DnsFailure::Drop);
    let timed_out = cluster_dns_probe::wait_answers_in(&ns, server, Duration::from_secs(2)).unwrap_err();
    let text = timed_out.to_string();
    assert!(
        text.contains(&format!("the cluster DNS {server}")) && text.contains("asking"),
        "{text}"
    );
    lab.shutdown().unwrap();
}

#[test]
fn dns_server_in_drop_mode_leaves_the_client_without_an_answer() {
    let lab = start("dns_server_in_drop_mode_leaves_the_client_without_an_answer");
    lab.dns()
        .set_a("web.lab.test", &[Ipv4Addr::LOCALHOST], 5)
        .unwrap();
    lab.dns().set_failure(DnsFailure::Drop);
    let mut cmd = lab.command("dig");
    cmd.args([
        &format!("@{}", lab.addrs().bridge_ip()),
        "web.lab.test",
        "+tries=1",
        "+time=1",
    ]);
    let out = agent::exec::run_unchecked(&mut cmd).unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success() && stdout.contains("timed out"), "{stdout}");
    assert_eq!(lab.dns().query_count("web.lab.test").unwrap(), 1);
    assert_eq!(lab.dns().queries()[0].outcome, "dropped");
    lab.shutdown().unwrap();
}

#[test]
fn http_server_serves_a_file_logs_the_request_and_404s_a_missing_one() {
    let lab = start("http_server_serves_a_file_logs_the_request_and_404s_a_missing_one");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("coredns.tgz");
    std::fs::write(&file, b"artifact bytes").unwrap();
    lab.http().publish("/coredns/coredns.tgz", &file).unwrap();
    assert_eq!(lab.http().request_count(), 0);

    let url = format!("{}/coredns/coredns.tgz", lab.addrs().http_url());
    let body = run_in(&lab, &["curl", "--noproxy", "*", "-sSf", &url]);
    assert_eq!(body, "artifact bytes");
    let missing = format!("{}/coredns/missing.tgz", lab.addrs().http_url());
    let status = run_in(
        &lab,
        &[
            "curl",
            "--noproxy",
            "*",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &missing,
        ],
    );
    assert_eq!(status, "404");

    let requests = lab.http().requests();
    let seen: Vec<(&str, &str, u16, u64)> = requests
        .iter()
        .map(|r| (r.method.as_str(), r.path.as_str(), r.status, r.bytes))
        .collect();
    assert_eq!(
        seen,
        [
            ("GET", "/coredns/coredns.tgz", 200, 14),
            ("GET", "/coredns/missing.tgz", 404, 0)
        ]
    );
    let log = std::fs::read_to_string(lab.log_dir().join("http-requests.log")).unwrap();
    assert!(log.contains("GET /coredns/coredns.tgz 200 14"), "{log}");
    assert!(log.contains("GET /coredns/missing.tgz 404 0"), "{log}");
    lab.shutdown().unwrap();
}

#[test]
fn services_are_not_reachable_from_the_host_namespace() {
    let lab = start("services_are_not_reachable_from_the_host_namespace");
    // Whatever answers on this host's own network (here a transparent proxy
    // answers every address), the lab's server must not see the request.
    let url = format!("{}/anything", lab.addrs().http_url());
    agent::exec::run_unchecked(Command::new("curl").args(["-sS", "--noproxy", "*", "--max-time", "2", &url]))
        .unwrap();
    assert_eq!(
        lab.http().requests(),
        [],
        "the artifact server was reached from the host namespace"
    );
    let inside = run_in(
        &lab,
        &[
            "curl",
            "--noproxy",
            "*",
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            &url,
        ],
    );
    assert_eq!(inside, "404");
    assert_eq!(
        lab.http().request_count(),
        1,
        "the request from inside the lab was not counted"
    );
    lab.shutdown().unwrap();
}

/// What tells this lab apart from a later one on the same number (another
/// test's lab may claim it the moment it is free, in this process too under
/// `cargo test`): its namespace's inode and a marker in its run directory.
struct ThisLab {
    name: String,
    inode: u64,
    marker: PathBuf,
}

impl ThisLab {
    fn mark(lab: &Lab) -> ThisLab {
        let marker = lab.run_dir().join("lab-network-test-marker");
        std::fs::write(&marker, "").unwrap();
        ThisLab {
            name: lab.name(),
            inode: netns::inode(&lab.name()).unwrap(),
            marker,
        }
    }

    /// Fails unless this lab's run directory, namespace and this process's
    /// threads in it are gone. Checked under the lab lock, which a claim holds
    /// while it writes its owner file (before it adds its namespace).
    fn assert_gone(&self) {
        let _lock = owner::lock().unwrap();
        let name = &self.name;
        assert!(
            !self.marker.exists(),
            "the run directory of {name} survived (its marker {} is there)",
            self.marker.display()
        );
        // With the marker gone, an owner file is a later claim's.
        let reclaimed = owner::owner_file(name).exists();
        assert!(reclaimed || !netns::exists(name), "namespace {name} survived");
        // The kernel reuses a freed namespace's inode for a later one.
        let reused = netns::list("lab-")
            .iter()
            .any(|other| netns::inode(other) == Some(self.inode));
        let me = format!("{}/", std::process::id());
        let mine: Vec<String> = netns::tasks_in(self.inode)
            .into_iter()
            .filter(|task| task.starts_with(&me))
            .collect();
        assert!(
            reused || mine.is_empty(),
            "threads of this process are still in {name}: {mine:?}"
        );
    }
}

#[test]
fn teardown_leaves_no_namespace_link_process_or_directory() {
    let lab = start("teardown_leaves_no_namespace_link_process_or_directory");
    let this = ThisLab::mark(&lab);
    let name = lab.name();
    let n = lab.number();
    lab.attach_vm().unwrap();
    lab.attach_vm().unwrap();
    let mut sleeper = lab.command("sleep");
    let mut sleeper = sleeper.arg("1000").stdin(Stdio::null()).spawn().unwrap();
    let started = Instant::now();
    while netns::pids_in(this.inode).is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "sleep never entered {name}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    lab.shutdown().unwrap();

    let status = exit_status_within_10s(&mut sleeper, "the lab's sleep");
    assert!(
        !status.success(),
        "the process in the lab was not killed: {status}"
    );
    let links = host_links();
    assert!(
        !links.contains(&format!("labbr{n}:")) && !links.contains(&format!("labtap{n}-")),
        "{links}"
    );
    this.assert_gone();
}

#[test]
fn dropping_a_lab_tears_it_down_like_shutdown() {
    let lab = start("dropping_a_lab_tears_it_down_like_shutdown");
    let this = ThisLab::mark(&lab);
    drop(lab);
    this.assert_gone();
}

/// A lab number no lab uses right now, from the top of the range (tests start
/// at the bottom); the caller holds the lab lock.
fn unused_number_under_the_lock() -> u8 {
    (120..=154)
        .rev()
        .find(|n| {
            let name = format!("lab-{n}");
            !netns::exists(&name) && !owner::run_dir(&name).exists()
        })
        .expect("a free lab number between 120 and 154")
}

/// Waits up to 10 s for `child` to exit; kills it and fails if it does not.
fn exit_status_within_10s(child: &mut std::process::Child, what: &str) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if started.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!(
                "{what} (pid {}) was still running 10 s after the sweep",
                child.id()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn stale_lab_of_a_dead_owner_is_swept_when_a_lab_starts() {
    // Built under the lab lock, as a harness builds its lab: another test's lab
    // starting meanwhile must not sweep a half-built stale lab (it would delete
    // the namespace while `ip netns exec` enters it, leaving `sleep` in an
    // anonymous namespace no sweep can find).
    let building = owner::lock().unwrap();
    let n = unused_number_under_the_lock();
    let name = format!("lab-{n}");
    // Simulate a harness killed with SIGKILL: a namespace with a process in it,
    // and an owner file naming a process that is gone.
    agent::exec::run(Command::new("ip").args(["netns", "add", &name])).unwrap();
    let mut dead = Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    dead.wait().unwrap();
    std::fs::create_dir_all(owner::run_dir(&name).join("vms/node")).unwrap();
    std::fs::write(owner::owner_file(&name), format!("{dead_pid} 12345\n")).unwrap();
    let mut orphan = netns::command_in(&name, "sleep");
    let mut orphan = orphan.arg("1000").stdin(Stdio::null()).spawn().unwrap();
    let inode = netns::inode(&name).unwrap();
    let started = Instant::now();
    while netns::pids_in(inode).is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "sleep never entered {name}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(building);

    let lab = start("stale_lab_of_a_dead_owner_is_swept_when_a_lab_starts");

    // Another test's lab may have swept it first (and claimed the number since);
    // either way this stale lab must be gone.
    assert!(
        !exit_status_within_10s(&mut orphan, "the stale lab's sleep").success(),
        "the stale lab's process was not killed"
    );
    {
        let _lock = owner::lock().unwrap();
        let dead_pid = dead_pid as i32;
        let claimed_since = owner::read_owner(&name).is_some_and(|o| o.pid != dead_pid);
        assert!(
            claimed_since || !netns::exists(&name),
            "stale namespace {name} survived; swept: {:?}",
            lab.swept()
        );
        assert!(
            claimed_since || !owner::run_dir(&name).exists(),
            "the stale lab's run directory survived"
        );
    }
    lab.shutdown().unwrap();
}

#[test]
fn lab_owned_by_a_live_process_is_not_swept_and_cannot_be_claimed() {
    let first = start("lab_owned_by_a_live_process_is_not_swept_and_cannot_be_claimed");
    let err = Lab::start(LabSpec {
        number: Some(first.number()),
        ..LabSpec::default()
    })
    .err()
    .expect("a second claim on a live lab must fail");
    assert!(err.to_string().contains("in use by process"), "{err}");
    assert!(netns::exists(&first.name()), "the live lab was swept");
    first.shutdown().unwrap();
}

#[test]
fn two_labs_coexist_on_one_subnet_each_in_its_namespace_with_their_own_records() {
    let a = start("two_labs_coexist_on_one_subnet_each_in_its_namespace_with_their_own_records.a");
    let b = start("two_labs_coexist_on_one_subnet_each_in_its_namespace_with_their_own_records.b");
    assert_ne!(a.number(), b.number());
    assert_eq!(
        a.addrs().bridge_ip(),
        b.addrs().bridge_ip(),
        "every lab has the same subnet (docs/lab.md): the namespaces keep them apart"
    );
    a.dns()
        .set_a("who.lab.test", &[Ipv4Addr::new(10, 0, 0, 1)], 5)
        .unwrap();
    b.dns()
        .set_a("who.lab.test", &[Ipv4Addr::new(10, 0, 0, 2)], 5)
        .unwrap();
    assert_eq!(dig(&a, &["+short"], "who.lab.test").trim(), "10.0.0.1");
    assert_eq!(dig(&b, &["+short"], "who.lab.test").trim(), "10.0.0.2");
    assert_eq!(a.dns().query_count("who.lab.test").unwrap(), 1);
    assert_eq!(b.dns().query_count("who.lab.test").unwrap(), 1);
    a.shutdown().unwrap();
    assert_eq!(
        dig(&b, &["+short"], "who.lab.test").trim(),
        "10.0.0.2",
        "b stopped answering when a went down"
    );
    b.shutdown().unwrap();
}
