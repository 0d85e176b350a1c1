//! Rendered Corefiles run in the real CoreDNS: in a fresh network namespace
//! (listener and metrics addresses on `lo`), `/ready` answers `OK` on each
//! listener, the health name answers rcode 0 on each, and the metrics address
//! serves CoreDNS metrics, and a query is logged exactly where a zone's
//! `QueryLogging` says; so does the fallback Corefile the supervisor serves
//! when CoreDNS refuses the rendered one.
//!
//! Needs root (`unshare --net`, `ip`) and the CoreDNS binary the lab builds
//! (`harness images build`), found under `$LAB_CACHE_DIR` (default
//! `~/.cache/unbounded-lab`) or given as `$LOCALDNS_TEST_COREDNS`.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod coredns_support;

use agent::corefile::{HEALTH_NAME, READY_PORT, server_blocks};
use coredns_support::{Kill, dns_rcode, find_coredns, local_dns_goal};

const INNER: &str = "LOCALDNS_TEST_INNER_CASE";

/// The rendered Corefile of `case`, or its fallback for `<case>:fallback`, and its metrics address.
fn corefile(case: &str) -> (String, String) {
    let (name, fallback) = match case.strip_suffix(":fallback") {
        Some(name) => (name, true),
        None => (case, false),
    };
    let l = local_dns_goal(name);
    let text = if fallback {
        agent::render::corefile::render_fallback(&l).unwrap()
    } else {
        agent::render::corefile::render(&l).unwrap()
    };
    (text, agent::corefile::COREDNS_METRICS_ADDRESS.to_string())
}

fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// Runs inside the fresh network namespace.
fn inner(case: &str) {
    let (text, metrics) = corefile(case);
    let blocks = server_blocks(&text).unwrap();
    let mut addrs: Vec<Ipv4Addr> = blocks.iter().flat_map(|b| b.binds()).collect();
    let metrics_ip: Ipv4Addr = metrics.rsplit_once(':').unwrap().0.parse().unwrap();
    addrs.push(metrics_ip);
    addrs.sort();
    addrs.dedup();
    agent::exec::run(Command::new("ip").args(["link", "set", "lo", "up"])).unwrap();
    for a in addrs.iter().filter(|a| !a.is_loopback()) {
        agent::exec::run(Command::new("ip").args(["addr", "add", &format!("{a}/32"), "dev", "lo"])).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("Corefile");
    std::fs::write(&conf, &text).unwrap();
    let log = std::fs::File::create(dir.path().join("log")).unwrap();
    let child = Command::new(find_coredns())
        .arg("-conf")
        .arg(&conf)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let _guard = Kill(child);
    let listeners: Vec<Ipv4Addr> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("ready "))
        .map(|a| a.rsplit_once(':').unwrap().0.parse().unwrap())
        .collect();
    assert_eq!(
        listeners.len(),
        2,
        "{case}: expected a `ready` per listener:\n{text}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    for l in &listeners {
        let addr = SocketAddr::from((*l, READY_PORT));
        loop {
            match http_get(addr, "/ready") {
                Ok(body) if body.ends_with("OK") => break,
                other => {
                    let log = std::fs::read_to_string(dir.path().join("log")).unwrap_or_default();
                    assert!(
                        Instant::now() < deadline,
                        "{case}: {addr}/ready never OK ({other:?}); CoreDNS log:\n{log}"
                    );
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
        assert_eq!(
            dns_rcode(*l, HEALTH_NAME, Duration::from_secs(2)).unwrap(),
            0,
            "{case}: {HEALTH_NAME} on {l}"
        );
    }
    let body = http_get(metrics.parse().unwrap(), "/metrics").unwrap();
    assert!(
        body.contains("coredns_build_info"),
        "{case}: no CoreDNS metrics on {metrics}"
    );
    queries_are_logged_where_the_zone_says(case, &blocks, &dir.path().join("log"));
}

/// Every zone with `log` (`QueryLogging: Log`) logs a query for a name in it; the root zone of
/// a listener whose `.` does not log does not log one.
fn queries_are_logged_where_the_zone_says(
    case: &str,
    blocks: &[agent::corefile::ServerBlock],
    log: &std::path::Path,
) {
    for (i, block) in blocks.iter().enumerate() {
        let zone = block.keys[0].trim_end_matches(":53").trim_end_matches('.');
        let Some(listener) = block.binds().first().copied() else {
            continue;
        };
        if zone == HEALTH_NAME {
            continue;
        }
        let name = if zone.is_empty() {
            format!("probe{i}.test")
        } else {
            format!("probe{i}.{zone}")
        };
        // Nothing answers behind the listeners here: the rcode does not matter, the log does.
        let _ = dns_rcode(listener, &name, Duration::from_millis(500));
        let logs = block.directives.iter().any(|d| d[0] == "log");
        // The `log` plugin's line (`errors` names a failed query too, in its own words).
        let line = format!("\"A IN {name}. udp");
        let deadline = Instant::now() + Duration::from_secs(if logs { 10 } else { 2 });
        let seen = loop {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            if text.contains(&line) || Instant::now() > deadline {
                break text.contains(&line);
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        assert_eq!(
            seen,
            logs,
            "{case}: a query for {name} on {listener} (zone `{zone}`, `log`: {logs}) logged: {seen}; CoreDNS log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }
}

#[test]
fn rendered_corefiles_serve_health_ready_and_metrics_in_real_coredns() {
    if let Ok(case) = std::env::var(INNER) {
        inner(&case);
        return;
    }
    find_coredns();
    let exe = std::env::current_exe().unwrap();
    for case in [
        "defaults",
        "custom-listeners-limits",
        "custom-template",
        // Per-zone settings: query logging, protocol, policy, cache and serve-stale values.
        "zone-overrides",
        // The fallback the supervisor serves when CoreDNS refuses the Corefile.
        "defaults:fallback",
        "custom-template:fallback",
    ] {
        let out = Command::new("unshare")
            .arg("--net")
            .arg(&exe)
            .args([
                "--exact",
                "rendered_corefiles_serve_health_ready_and_metrics_in_real_coredns",
                "--nocapture",
            ])
            .env(INNER, case)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{case} failed in a fresh network namespace (needs root for `unshare --net`):\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
