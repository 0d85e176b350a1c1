//! What the supervisor counts for its metrics: CoreDNS restarts, standby take-overs, hung
//! CoreDNS killed, the last recovery's time, whether a standby is ready; with the fallback state
//! and the upstreams the serving Corefile forwards to, written out in Prometheus's text format
//! beside CoreDNS's own series (docs/metrics.md, "The supervisor's series").

use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use localdns::corefile::server_blocks;

/// The counts, shared between the supervisor's loop and its metrics endpoint.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Tally {
    /// CoreDNS exits the supervisor answered after it was first healthy (a crash, SIGKILL, the
    /// OOM killer, a hung CoreDNS it killed).
    pub coredns_restarts: u64,
    /// Of those, the ones a warm standby took over.
    pub standby_takeovers: u64,
    /// Hung CoreDNS the supervisor killed (failed checks in a row, or queries waiting on it).
    pub hung_killed: u64,
    /// From the last CoreDNS exit until both listeners answered again.
    pub last_recovery: Option<Duration>,
    /// A standby CoreDNS is ready to take over.
    pub standby_ready: bool,
    /// Reloads (`systemctl reload localdns`) whose new CoreDNS took over.
    pub reloads: u64,
    /// Reloads whose new CoreDNS refused the Corefile (the one before went on serving).
    pub reloads_refused: u64,
    /// The Corefile CoreDNS serves (the fallback while degraded): its `forward` lines name the
    /// upstreams in use.
    pub serving: std::path::PathBuf,
}

/// A [`Tally`] the loop updates and the endpoint reads.
pub type SharedTally = Arc<Mutex<Tally>>;

/// Applies `change` to the shared tally.
pub fn update(tally: &SharedTally, change: impl FnOnce(&mut Tally)) {
    change(&mut tally.lock().unwrap_or_else(|e| e.into_inner()));
}

/// The listeners' upstreams as the Corefile forwards to them: `(listener, upstream)` for each
/// `forward` of a block that binds one listener.
pub fn upstreams_in(corefile: &str, listeners: [(&'static str, Ipv4Addr); 2]) -> Vec<(&'static str, String)> {
    let Ok(blocks) = server_blocks(corefile) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for block in &blocks {
        let binds = block.binds();
        for (name, listener) in listeners {
            if binds != [listener] {
                continue;
            }
            for directive in block.directives.iter().filter(|d| d[0] == "forward") {
                for to in directive.iter().skip(2).take_while(|w| *w != "{") {
                    if !out.iter().any(|(n, t)| *n == name && t == to) {
                        out.push((name, to.clone()));
                    }
                }
            }
        }
    }
    out
}

/// What the supervisor's series say now.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub tally: Tally,
    /// The fallback Corefile serves (CoreDNS refused the Corefile).
    pub fallback: bool,
    /// The status says degraded: the fallback serves, or a reload was refused.
    pub degraded: bool,
    pub upstreams: Vec<(&'static str, String)>,
    /// CoreDNS's own endpoint answered this scrape.
    pub coredns_metrics_up: bool,
}

/// Escapes a label value for the text format.
fn label(value: &str) -> String {
    value
        .replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', r"\n")
}

fn series(out: &mut String, name: &str, kind: &str, help: &str, lines: &[(String, f64)]) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, value) in lines {
        let _ = writeln!(out, "{name}{labels} {value}");
    }
}

fn flag(on: bool) -> f64 {
    if on { 1.0 } else { 0.0 }
}

impl Snapshot {
    /// The series in Prometheus's text format (version 0.0.4).
    pub fn to_text(&self) -> String {
        let t = &self.tally;
        let mut out = String::new();
        let one = |value: f64| vec![(String::new(), value)];
        series(
            &mut out,
            "localdns_supervisor_coredns_restarts_total",
            "counter",
            "CoreDNS exits the supervisor answered after it was first healthy (crash, kill, OOM, hung).",
            &one(t.coredns_restarts as f64),
        );
        series(
            &mut out,
            "localdns_supervisor_standby_takeovers_total",
            "counter",
            "CoreDNS exits answered by the warm standby taking over.",
            &one(t.standby_takeovers as f64),
        );
        series(
            &mut out,
            "localdns_supervisor_hung_killed_total",
            "counter",
            "Hung CoreDNS processes the supervisor killed.",
            &one(t.hung_killed as f64),
        );
        if let Some(last) = t.last_recovery {
            series(
                &mut out,
                "localdns_supervisor_last_recovery_seconds",
                "gauge",
                "From the last CoreDNS exit until both listeners answered again.",
                &one(last.as_secs_f64()),
            );
        }
        series(
            &mut out,
            "localdns_supervisor_standby_ready",
            "gauge",
            "1 when a warm standby CoreDNS is ready to take over.",
            &one(flag(t.standby_ready)),
        );
        series(
            &mut out,
            "localdns_supervisor_fallback",
            "gauge",
            "1 when CoreDNS refused the Corefile and the fallback Corefile serves (degraded).",
            &one(flag(self.fallback)),
        );
        series(
            &mut out,
            "localdns_supervisor_degraded",
            "gauge",
            "1 while the status says degraded: the fallback serves, or CoreDNS refused a reloaded Corefile.",
            &one(flag(self.degraded)),
        );
        series(
            &mut out,
            "localdns_supervisor_reloads_total",
            "counter",
            "Reloads whose new CoreDNS took over.",
            &one(t.reloads as f64),
        );
        series(
            &mut out,
            "localdns_supervisor_reloads_refused_total",
            "counter",
            "Reloads whose new CoreDNS refused the Corefile (the one before went on serving).",
            &one(t.reloads_refused as f64),
        );
        let upstreams: Vec<(String, f64)> = self
            .upstreams
            .iter()
            .map(|(listener, to)| {
                (
                    format!("{{listener=\"{listener}\",upstream=\"{}\"}}", label(to)),
                    1.0,
                )
            })
            .collect();
        series(
            &mut out,
            "localdns_supervisor_upstream_info",
            "gauge",
            "The upstreams each listener forwards to in the serving Corefile.",
            &upstreams,
        );
        series(
            &mut out,
            "localdns_supervisor_coredns_metrics_up",
            "gauge",
            "1 when CoreDNS's own metrics endpoint answered this scrape.",
            &one(flag(self.coredns_metrics_up)),
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODE: Ipv4Addr = Ipv4Addr::new(169, 254, 10, 10);
    const CLUSTER: Ipv4Addr = Ipv4Addr::new(169, 254, 10, 11);

    #[test]
    fn the_upstreams_are_read_per_listener_from_the_forward_lines() {
        let corefile = "health.example:53 {\n    bind 169.254.10.10 169.254.10.11\n    whoami\n}\n\
            .:53 {\n    bind 169.254.10.10\n    forward . 192.168.100.1 192.168.100.2 {\n        force_tcp\n    }\n}\n\
            .:53 {\n    bind 169.254.10.11\n    forward . 10.96.0.10\n}\n\
            example.org:53 {\n    bind 169.254.10.10\n    forward . 192.168.100.2 10.96.0.10\n}\n";
        assert_eq!(
            upstreams_in(corefile, [("node", NODE), ("cluster", CLUSTER)]),
            [
                ("node", "192.168.100.1".to_string()),
                ("node", "192.168.100.2".to_string()),
                ("cluster", "10.96.0.10".to_string()),
                ("node", "10.96.0.10".to_string()),
            ],
            "each pair once, in the order first seen"
        );
        assert!(upstreams_in("not { a corefile", [("node", NODE), ("cluster", CLUSTER)]).is_empty());
    }

    #[test]
    fn every_series_is_written_with_its_type_and_value() {
        let snapshot = Snapshot {
            tally: Tally {
                coredns_restarts: 3,
                standby_takeovers: 2,
                hung_killed: 1,
                last_recovery: Some(Duration::from_millis(1500)),
                standby_ready: true,
                reloads: 4,
                reloads_refused: 5,
                serving: "/etc/Corefile".into(),
            },
            fallback: true,
            degraded: true,
            upstreams: vec![("node", "192.168.100.1".into())],
            coredns_metrics_up: false,
        };
        let text = snapshot.to_text();
        for line in [
            "# TYPE localdns_supervisor_coredns_restarts_total counter",
            "localdns_supervisor_coredns_restarts_total 3\n",
            "localdns_supervisor_standby_takeovers_total 2\n",
            "localdns_supervisor_hung_killed_total 1\n",
            "localdns_supervisor_last_recovery_seconds 1.5\n",
            "localdns_supervisor_standby_ready 1\n",
            "localdns_supervisor_fallback 1\n",
            "localdns_supervisor_degraded 1\n",
            "localdns_supervisor_reloads_total 4\n",
            "localdns_supervisor_reloads_refused_total 5\n",
            "localdns_supervisor_upstream_info{listener=\"node\",upstream=\"192.168.100.1\"} 1\n",
            "localdns_supervisor_coredns_metrics_up 0\n",
        ] {
            assert!(text.contains(line), "{line:?} missing from:\n{text}");
        }
        let fresh = Snapshot {
            tally: Tally::default(),
            fallback: false,
            degraded: false,
            upstreams: Vec::new(),
            coredns_metrics_up: true,
        }
        .to_text();
        assert!(!fresh.contains("last_recovery_seconds "), "{fresh}");
        assert!(fresh.contains("localdns_supervisor_fallback 0\n"), "{fresh}");
    }
}
