//! The supervisor's settings, from the environment file systemd passes (`EnvironmentFile=`).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::time::Duration;

use super::FailureWindow;

/// A missing or malformed environment variable.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("environment variable {0} is not set (it comes from /etc/unbounded/localdns/environment)")]
    Missing(&'static str),
    #[error("environment variable {name}={value:?} is not {expected}")]
    Invalid {
        name: &'static str,
        value: String,
        expected: &'static str,
    },
}

/// Everything the supervisor needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub node_listener: Ipv4Addr,
    pub cluster_listener: Ipv4Addr,
    pub corefile: PathBuf,
    /// What CoreDNS serves when it refuses [`Settings::corefile`] (`LOCALDNS_FALLBACK_COREFILE`;
    /// unset: no fallback, a refused Corefile ends the supervisor).
    pub fallback_corefile: Option<PathBuf>,
    pub coredns: PathBuf,
    /// The name the health check asks for (answered by the `whoami` block).
    pub health_name: String,
    /// The port of CoreDNS's `ready` plugin on each listener.
    pub ready_port: u16,
    /// Where the supervisor serves metrics: CoreDNS's and its own (`LOCALDNS_METRICS_ADDRESS`).
    pub metrics_address: Option<SocketAddrV4>,
    /// Where CoreDNS's `prometheus` plugin serves its series, on loopback, for the supervisor to
    /// pass on (`LOCALDNS_COREDNS_METRICS_ADDRESS`; unset: the supervisor's series alone).
    pub coredns_metrics_address: Option<SocketAddrV4>,
    /// How long CoreDNS may take to become healthy (`LOCALDNS_START_TIMEOUT_SECS`, default 60).
    pub start_timeout: Duration,
    /// WatchdogSec/5 from `WATCHDOG_USEC` (default 60 s → 12 s).
    pub check_interval: Duration,
    /// `WATCHDOG_USEC` was set for this process (`WATCHDOG_PID` unset or ours): systemd expects
    /// `WATCHDOG=1`.
    pub watchdog_enabled: bool,
    /// The failure rule (`LOCALDNS_FAILURE_WINDOW_SECS`, `LOCALDNS_FAILURE_THRESHOLD`; 600 s, 10).
    pub failure_window: Duration,
    pub failure_threshold: usize,
    /// Failed checks in a row after which CoreDNS is taken for hung and killed
    /// (`LOCALDNS_HUNG_AFTER_FAILED_CHECKS`, default 3; 0: never).
    pub hung_after_failed_checks: u32,
    /// How long queries may wait in a listener socket of the serving CoreDNS while it uses no CPU
    /// before it is taken for hung and killed (`LOCALDNS_STUCK_AFTER_MS`, default 1000; 0: never;
    /// [`super::stuck`]).
    pub stuck_after: Option<Duration>,
    /// Where the warm standby CoreDNS keeps its Corefile: systemd's `$RUNTIME_DIRECTORY` (the
    /// unit's `RuntimeDirectory=localdns`, the first when it names several). `None` — no such
    /// directory, or `LOCALDNS_STANDBY=0` — runs no standby ([`super::standby`]).
    pub standby_dir: Option<PathBuf>,
}

/// DNS port of both listeners.
pub use localdns::corefile::DNS_PORT;
/// Failed health checks in a row after which CoreDNS is taken for hung and killed.
pub const DEFAULT_HUNG_AFTER_FAILED_CHECKS: u32 = 3;
/// How long queries may wait on a serving CoreDNS that uses no CPU before it is taken for hung.
pub const DEFAULT_STUCK_AFTER: Duration = Duration::from_secs(1);
/// The watchdog interval when systemd sets none (the unit's `WatchdogSec=60`).
pub const DEFAULT_WATCHDOG: Duration = Duration::from_secs(60);

fn parse<T: std::str::FromStr>(
    name: &'static str,
    value: &str,
    expected: &'static str,
) -> Result<T, SettingsError> {
    value.trim().parse().map_err(|_| SettingsError::Invalid {
        name,
        value: value.into(),
        expected,
    })
}

impl Settings {
    /// Reads the settings through `var` (the process environment in production, a map in tests).
    /// `watchdog` is systemd's watchdog interval for this process as [`sd_notify::watchdog_enabled`]
    /// reads it: `WATCHDOG_USEC`, unless `WATCHDOG_PID` names another process.
    pub fn from_vars(
        var: impl Fn(&str) -> Option<String>,
        watchdog: Option<Duration>,
    ) -> Result<Settings, SettingsError> {
        let required = |name: &'static str| {
            var(name)
                .filter(|v| !v.trim().is_empty())
                .ok_or(SettingsError::Missing(name))
        };
        let node_listener = parse(
            "LOCALDNS_NODE_LISTENER",
            &required("LOCALDNS_NODE_LISTENER")?,
            "an IPv4 address",
        )?;
        let cluster_listener = parse(
            "LOCALDNS_CLUSTER_LISTENER",
            &required("LOCALDNS_CLUSTER_LISTENER")?,
            "an IPv4 address",
        )?;
        let health_name = required("LOCALDNS_HEALTH_NAME")?.trim().to_owned();
        if !health_name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        {
            return Err(SettingsError::Invalid {
                name: "LOCALDNS_HEALTH_NAME",
                value: health_name,
                expected: "a DNS name",
            });
        }
        let ready_port = parse(
            "LOCALDNS_READY_PORT",
            &required("LOCALDNS_READY_PORT")?,
            "a port number",
        )?;
        let metrics_address = match var("LOCALDNS_METRICS_ADDRESS").filter(|v| !v.trim().is_empty()) {
            Some(v) => Some(parse("LOCALDNS_METRICS_ADDRESS", &v, "an IPv4:port address")?),
            None => None,
        };
        let coredns_metrics_address =
            match var("LOCALDNS_COREDNS_METRICS_ADDRESS").filter(|v| !v.trim().is_empty()) {
                Some(v) => Some(parse(
                    "LOCALDNS_COREDNS_METRICS_ADDRESS",
                    &v,
                    "an IPv4:port address",
                )?),
                None => None,
            };
        let start_timeout = match var("LOCALDNS_START_TIMEOUT_SECS") {
            Some(v) => Duration::from_secs(parse("LOCALDNS_START_TIMEOUT_SECS", &v, "a number of seconds")?),
            None => Duration::from_secs(60),
        };
        // A set WATCHDOG_USEC must be a positive number, whichever process it is meant for.
        if let Some(v) = var("WATCHDOG_USEC") {
            let usec: u64 = parse("WATCHDOG_USEC", &v, "a number of microseconds")?;
            if usec == 0 {
                return Err(SettingsError::Invalid {
                    name: "WATCHDOG_USEC",
                    value: v,
                    expected: "positive",
                });
            }
        }
        let (watchdog, watchdog_enabled) = match watchdog {
            Some(interval) if !interval.is_zero() => (interval, true),
            _ => (DEFAULT_WATCHDOG, false),
        };
        let failure_window = match var("LOCALDNS_FAILURE_WINDOW_SECS") {
            Some(v) => Duration::from_secs(parse("LOCALDNS_FAILURE_WINDOW_SECS", &v, "a number of seconds")?),
            None => FailureWindow::DEFAULT_WINDOW,
        };
        let failure_threshold = match var("LOCALDNS_FAILURE_THRESHOLD") {
            Some(v) => parse("LOCALDNS_FAILURE_THRESHOLD", &v, "a count")?,
            None => FailureWindow::DEFAULT_THRESHOLD,
        };
        let hung_after_failed_checks = match var("LOCALDNS_HUNG_AFTER_FAILED_CHECKS") {
            Some(v) => parse("LOCALDNS_HUNG_AFTER_FAILED_CHECKS", &v, "a count (0: never)")?,
            None => DEFAULT_HUNG_AFTER_FAILED_CHECKS,
        };
        let stuck_after = match var("LOCALDNS_STUCK_AFTER_MS") {
            Some(v) => Some(Duration::from_millis(parse(
                "LOCALDNS_STUCK_AFTER_MS",
                &v,
                "a number of milliseconds (0: never)",
            )?))
            .filter(|d| !d.is_zero()),
            None => Some(DEFAULT_STUCK_AFTER),
        };
        let standby = match var("LOCALDNS_STANDBY").as_deref().map(str::trim) {
            None | Some("" | "1") => true,
            Some("0") => false,
            Some(other) => {
                return Err(SettingsError::Invalid {
                    name: "LOCALDNS_STANDBY",
                    value: other.into(),
                    expected: "1 (a warm standby CoreDNS, the default) or 0 (none)",
                });
            }
        };
        let standby_dir = var("RUNTIME_DIRECTORY")
            .and_then(|dirs| dirs.split(':').next().map(str::trim).map(str::to_owned))
            .filter(|dir| standby && !dir.is_empty())
            .map(PathBuf::from);
        Ok(Settings {
            node_listener,
            cluster_listener,
            corefile: required("LOCALDNS_COREFILE")?.trim().into(),
            fallback_corefile: var("LOCALDNS_FALLBACK_COREFILE")
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            coredns: required("LOCALDNS_COREDNS")?.trim().into(),
            health_name,
            ready_port,
            metrics_address,
            coredns_metrics_address,
            start_timeout,
            check_interval: watchdog / 5,
            watchdog_enabled,
            failure_window,
            failure_threshold,
            hung_after_failed_checks,
            stuck_after,
            standby_dir,
        })
    }

    /// Reads the settings from the process environment.
    pub fn from_env() -> Result<Settings, SettingsError> {
        Settings::from_vars(|name| std::env::var(name).ok(), sd_notify::watchdog_enabled())
    }

    pub fn listeners(&self) -> [Ipv4Addr; 2] {
        [self.node_listener, self.cluster_listener]
    }

    /// How often the serving CoreDNS's listener queues are looked at: a fifth of
    /// [`Settings::stuck_after`], between 100 ms and 1 s.
    pub fn stuck_poll(&self) -> Option<Duration> {
        self.stuck_after
            .map(|after| (after / 5).clamp(Duration::from_millis(100), Duration::from_secs(1)))
    }

    /// How long one probe may take: half a tick, between 200 ms and 2 s.
    pub fn probe_timeout(&self) -> Duration {
        (self.check_interval / 2).clamp(Duration::from_millis(200), Duration::from_secs(2))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(extra: &[(&str, &str)]) -> HashMap<String, String> {
        let mut map: HashMap<String, String> = [
            ("LOCALDNS_NODE_LISTENER", "169.254.10.10"),
            ("LOCALDNS_CLUSTER_LISTENER", "169.254.10.11"),
            ("LOCALDNS_COREFILE", "/etc/unbounded/localdns/Corefile"),
            ("LOCALDNS_COREDNS", "/usr/local/bin/coredns"),
            ("LOCALDNS_HEALTH_NAME", "health-check.localdns.local"),
            ("LOCALDNS_READY_PORT", "8181"),
            ("LOCALDNS_METRICS_ADDRESS", "192.168.100.10:9253"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        for (k, v) in extra {
            map.insert((*k).to_owned(), (*v).to_owned());
        }
        map
    }

    fn read(map: &HashMap<String, String>) -> Result<Settings, SettingsError> {
        Settings::from_vars(|k| map.get(k).cloned(), None)
    }

    #[test]
    fn environment_file_gives_listeners_and_default_rule() {
        let s = read(&env(&[])).unwrap();
        assert_eq!(
            s.listeners(),
            [Ipv4Addr::new(169, 254, 10, 10), Ipv4Addr::new(169, 254, 10, 11)]
        );
        assert_eq!(s.check_interval, Duration::from_secs(12));
        assert!(!s.watchdog_enabled);
        assert_eq!(
            (s.failure_window, s.failure_threshold),
            (Duration::from_secs(600), 10)
        );
        assert_eq!(s.start_timeout, Duration::from_secs(60));
        assert_eq!(s.fallback_corefile, None);
    }

    #[test]
    fn the_fallback_corefile_is_taken_when_set_and_not_blank() {
        let s = read(&env(&[(
            "LOCALDNS_FALLBACK_COREFILE",
            " /etc/unbounded/localdns/Corefile.fallback ",
        )]))
        .unwrap();
        assert_eq!(
            s.fallback_corefile.as_deref(),
            Some(std::path::Path::new("/etc/unbounded/localdns/Corefile.fallback"))
        );
        let s = read(&env(&[("LOCALDNS_FALLBACK_COREFILE", " ")])).unwrap();
        assert_eq!(s.fallback_corefile, None);
    }

    #[test]
    fn watchdog_sets_the_tick_to_a_fifth() {
        let map = env(&[("WATCHDOG_USEC", "30000000")]);
        let s = Settings::from_vars(|k| map.get(k).cloned(), Some(Duration::from_secs(30))).unwrap();
        assert_eq!(s.check_interval, Duration::from_secs(6));
        assert!(s.watchdog_enabled);
    }

    #[test]
    fn watchdog_usec_for_another_process_keeps_the_default_tick() {
        // sd_notify::watchdog_enabled() gives None when WATCHDOG_PID names another process.
        let s = read(&env(&[("WATCHDOG_USEC", "30000000"), ("WATCHDOG_PID", "1")])).unwrap();
        assert_eq!(s.check_interval, Duration::from_secs(12));
        assert!(!s.watchdog_enabled);
    }

    #[rstest::rstest]
    #[case("soon", "a number of microseconds")]
    #[case("0", "positive")]
    fn malformed_watchdog_usec_is_named_with_its_value(#[case] value: &str, #[case] expected: &str) {
        let err = read(&env(&[("WATCHDOG_USEC", value)])).unwrap_err().to_string();
        assert!(
            err.contains("WATCHDOG_USEC") && err.contains(&format!("{value:?}")) && err.contains(expected),
            "{err}"
        );
    }

    #[test]
    fn missing_variable_is_named() {
        let mut map = env(&[]);
        map.remove("LOCALDNS_COREFILE");
        assert!(read(&map).unwrap_err().to_string().contains("LOCALDNS_COREFILE"));
    }

    #[test]
    fn malformed_listener_is_named_with_its_value() {
        let err = read(&env(&[("LOCALDNS_CLUSTER_LISTENER", "169.254.10")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("LOCALDNS_CLUSTER_LISTENER") && err.contains("169.254.10"),
            "{err}"
        );
    }

    #[test]
    fn failure_rule_can_be_overridden_for_tests() {
        let s = read(&env(&[
            ("LOCALDNS_FAILURE_WINDOW_SECS", "5"),
            ("LOCALDNS_FAILURE_THRESHOLD", "3"),
        ]))
        .unwrap();
        assert_eq!(
            (s.failure_window, s.failure_threshold),
            (Duration::from_secs(5), 3)
        );
        assert_eq!(s.hung_after_failed_checks, DEFAULT_HUNG_AFTER_FAILED_CHECKS);
        let off = read(&env(&[("LOCALDNS_HUNG_AFTER_FAILED_CHECKS", "0")])).unwrap();
        assert_eq!(off.hung_after_failed_checks, 0);
        let bad = read(&env(&[("LOCALDNS_HUNG_AFTER_FAILED_CHECKS", "-1")])).unwrap_err();
        assert!(
            bad.to_string().contains("LOCALDNS_HUNG_AFTER_FAILED_CHECKS"),
            "{bad}"
        );
    }

    #[test]
    fn the_stuck_rule_waits_a_second_by_default_looks_five_times_and_can_be_turned_off() {
        let s = read(&env(&[])).unwrap();
        assert_eq!(s.stuck_after, Some(Duration::from_secs(1)));
        assert_eq!(s.stuck_poll(), Some(Duration::from_millis(200)));
        let quick = read(&env(&[("LOCALDNS_STUCK_AFTER_MS", "100")])).unwrap();
        assert_eq!(quick.stuck_poll(), Some(Duration::from_millis(100)));
        let off = read(&env(&[("LOCALDNS_STUCK_AFTER_MS", "0")])).unwrap();
        assert_eq!((off.stuck_after, off.stuck_poll()), (None, None));
        let bad = read(&env(&[("LOCALDNS_STUCK_AFTER_MS", "1s")])).unwrap_err();
        assert!(
            bad.to_string().contains("LOCALDNS_STUCK_AFTER_MS=\"1s\""),
            "{bad}"
        );
    }

    #[test]
    fn the_standby_lives_in_systemds_runtime_directory_unless_turned_off() {
        assert_eq!(
            read(&env(&[])).unwrap().standby_dir,
            None,
            "no RUNTIME_DIRECTORY, no standby"
        );
        let on = read(&env(&[("RUNTIME_DIRECTORY", "/run/localdns:/run/other")])).unwrap();
        assert_eq!(on.standby_dir, Some(PathBuf::from("/run/localdns")));
        let off = read(&env(&[
            ("RUNTIME_DIRECTORY", "/run/localdns"),
            ("LOCALDNS_STANDBY", "0"),
        ]))
        .unwrap();
        assert_eq!(off.standby_dir, None);
        let bad = read(&env(&[("LOCALDNS_STANDBY", "yes")])).unwrap_err();
        assert!(bad.to_string().contains("LOCALDNS_STANDBY"), "{bad}");
    }
}
