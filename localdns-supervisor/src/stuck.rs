//! A hung CoreDNS found by its listeners' queues: queries wait in a listener socket of the serving
//! CoreDNS (UDP bytes, TCP connections not accepted) at every look for [`Settings::stuck_after`],
//! while the process's CPU time does not advance. A CoreDNS that serves drains its queues within
//! milliseconds, and one with a backlog it cannot drain (a query storm) burns CPU; one that
//! neither reads nor runs (SIGSTOP, a deadlock) serves nobody. A CoreDNS the kernel shows stopped
//! (state `T`: SIGSTOP, SIGTSTP) with queries waiting at two looks in a row is taken for hung
//! without the full wait: a stopped process cannot serve until someone continues it. A tracer's
//! stop (state `t`, a debugger) is left to the CPU rule. This needs no packet of ours (no probe,
//! no conntrack entry): a `sock_diag` dump ([`node_base::sockets`]), `/proc/<pid>/fd` and
//! `/proc/<pid>/stat` only, and it acts as soon as clients wait instead of after three failed
//! health checks.

use std::time::Duration;

use tokio::time::Instant;

use super::Settings;
use super::settings::DNS_PORT;

/// What one look saw of the serving CoreDNS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Look {
    /// One of its listener sockets had something waiting.
    pub waiting: bool,
    /// Its user + system CPU time in clock ticks (`None`: unreadable).
    pub cpu_ticks: Option<u64>,
    /// The kernel shows it stopped by a signal (state `T`).
    pub stopped: bool,
}

/// Why the serving CoreDNS is taken for hung, and how long queries waited on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stuck {
    /// Queries waited at every look for the whole wait while it used no CPU time.
    NoCpu(Duration),
    /// Queries waited at two looks in a row while it was stopped (state `T`) at both.
    Stopped(Duration),
}

impl std::fmt::Display for Stuck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stuck::NoCpu(waited) => write!(
                f,
                "queries waited {waited:.1?} on CoreDNS's listener sockets while it used no CPU"
            ),
            Stuck::Stopped(waited) => write!(
                f,
                "queries waited {waited:.1?} on CoreDNS's listener sockets while it was stopped (state T)"
            ),
        }
    }
}

/// Follows the looks at one CoreDNS; [`StuckWatch::observe`] says when it is stuck.
#[derive(Debug, Default)]
pub struct StuckWatch {
    /// Since when queries have waited at every look, and the CPU time then.
    since: Option<(Instant, Option<u64>)>,
    /// Since when queries have waited at every look with CoreDNS stopped at each.
    stopped_since: Option<Instant>,
}

impl StuckWatch {
    /// Takes one look at `now`; `Some` when queries have waited at every look for at least `after`
    /// and the CPU time did not advance meanwhile, or at this look and the one before with
    /// CoreDNS stopped at both.
    pub fn observe(&mut self, look: Look, now: Instant, after: Duration) -> Option<Stuck> {
        if !look.waiting {
            self.reset();
            return None;
        }
        match (look.stopped, self.stopped_since) {
            (true, Some(at)) => return Some(Stuck::Stopped(now.duration_since(at))),
            (true, None) => self.stopped_since = Some(now),
            (false, _) => self.stopped_since = None,
        }
        match self.since {
            Some((at, ticks)) if ticks == look.cpu_ticks && ticks.is_some() => {
                let waited = now.duration_since(at);
                (waited >= after).then_some(Stuck::NoCpu(waited))
            }
            // The first look with queries waiting, or CoreDNS ran since (it is working through
            // them), or its CPU time cannot be read (never taken for stuck).
            _ => {
                self.since = Some((now, look.cpu_ticks));
                None
            }
        }
    }

    /// Forgets what it saw (a new CoreDNS serves).
    pub fn reset(&mut self) {
        self.since = None;
        self.stopped_since = None;
    }
}

/// Whether the text of `/proc/<pid>/stat` shows the process stopped by a signal (state `T`; a
/// tracer's stop is `t`).
pub fn stopped_in_stat(stat: &str) -> bool {
    stat.rfind(')')
        .and_then(|end| stat[end + 1..].split_whitespace().next())
        == Some("T")
}

/// User + system CPU time of a process in clock ticks, from the text of `/proc/<pid>/stat`
/// (fields 14 and 15; the command name in field 2 may hold spaces and parentheses).
pub fn cpu_ticks_in_stat(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // `after_name` starts at field 3 (the state): utime is field 14, stime field 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// One look at CoreDNS `pid`: whether one of its listener sockets has something waiting, and its
/// CPU time. Asks the kernel for the listeners' sockets first ([`node_base::sockets::waiting_on`]) and
/// reads the process only when something waits on one.
pub fn look(pid: u32, settings: &Settings) -> Look {
    let waiting = node_base::sockets::waiting_on(&settings.listeners(), DNS_PORT).unwrap_or_default();
    if waiting.is_empty() {
        return Look {
            waiting: false,
            cpu_ticks: None,
            stopped: false,
        };
    }
    // Another process's sockets on the listeners (a restart's bridge) are not this CoreDNS's.
    let inodes = node_base::sockets::socket_inodes(pid).unwrap_or_default();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    Look {
        waiting: waiting.iter().any(|w| inodes.contains(&w.inode)),
        cpu_ticks: cpu_ticks_in_stat(&stat),
        stopped: stopped_in_stat(&stat),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AFTER: Duration = Duration::from_secs(1);

    fn waiting(ticks: u64) -> Look {
        Look {
            waiting: true,
            cpu_ticks: Some(ticks),
            stopped: false,
        }
    }

    const IDLE: Look = Look {
        waiting: false,
        cpu_ticks: None,
        stopped: false,
    };

    #[test]
    fn queries_waiting_for_the_whole_time_with_no_cpu_used_is_stuck() {
        let t0 = Instant::now();
        let mut w = StuckWatch::default();
        assert_eq!(w.observe(waiting(7), t0, AFTER), None);
        assert_eq!(
            w.observe(waiting(7), t0 + Duration::from_millis(800), AFTER),
            None
        );
        assert_eq!(
            w.observe(waiting(7), t0 + Duration::from_millis(1200), AFTER),
            Some(Stuck::NoCpu(Duration::from_millis(1200)))
        );
    }

    #[test]
    fn an_empty_queue_or_cpu_used_starts_the_count_again() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut w = StuckWatch::default();
        w.observe(waiting(7), ms(0), AFTER);
        // Drained once: a CoreDNS that serves.
        assert_eq!(w.observe(IDLE, ms(500), AFTER), None);
        assert_eq!(w.observe(waiting(7), ms(600), AFTER), None);
        assert_eq!(w.observe(waiting(7), ms(1500), AFTER), None);
        // It ran (a backlog it works through): counted from here.
        assert_eq!(w.observe(waiting(9), ms(1700), AFTER), None);
        assert_eq!(w.observe(waiting(9), ms(2600), AFTER), None);
        assert_eq!(
            w.observe(waiting(9), ms(2700), AFTER),
            Some(Stuck::NoCpu(Duration::from_millis(1000)))
        );
        w.reset();
        assert_eq!(w.observe(waiting(9), ms(2800), AFTER), None);
    }

    #[test]
    fn unreadable_cpu_time_is_never_stuck() {
        let t0 = Instant::now();
        let mut w = StuckWatch::default();
        let unknown = Look {
            waiting: true,
            cpu_ticks: None,
            stopped: false,
        };
        for n in 0..10 {
            assert_eq!(w.observe(unknown, t0 + Duration::from_secs(n), AFTER), None);
        }
    }

    #[test]
    fn a_stopped_coredns_with_queries_waiting_at_two_looks_in_a_row_is_stuck_at_once() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let stopped = Look {
            stopped: true,
            ..waiting(7)
        };
        let mut w = StuckWatch::default();
        assert_eq!(w.observe(stopped, ms(0), AFTER), None);
        assert_eq!(
            w.observe(stopped, ms(200), AFTER),
            Some(Stuck::Stopped(Duration::from_millis(200)))
        );
        // Continued in between (job control's stop and go), or nothing waiting: counted again.
        w.reset();
        assert_eq!(w.observe(stopped, ms(400), AFTER), None);
        assert_eq!(w.observe(waiting(8), ms(600), AFTER), None);
        assert_eq!(w.observe(stopped, ms(800), AFTER), None);
        assert_eq!(w.observe(IDLE, ms(1000), AFTER), None);
        assert_eq!(w.observe(stopped, ms(1200), AFTER), None);
        assert_eq!(
            w.observe(stopped, ms(1300), AFTER),
            Some(Stuck::Stopped(Duration::from_millis(100)))
        );
    }

    #[test]
    fn only_state_t_is_stopped_not_a_tracer_stop_or_a_sleep() {
        assert!(stopped_in_stat("4242 (core) dns) T 1 4242"));
        assert!(!stopped_in_stat("4242 (coredns) t 1 4242"));
        assert!(!stopped_in_stat("4242 (T) S 1 4242"));
        assert!(!stopped_in_stat(""));
    }

    #[test]
    fn the_reasons_name_the_rule_that_found_it() {
        let waited = Duration::from_millis(1200);
        assert_eq!(
            Stuck::NoCpu(waited).to_string(),
            "queries waited 1.2s on CoreDNS's listener sockets while it used no CPU"
        );
        assert!(
            Stuck::Stopped(waited)
                .to_string()
                .ends_with("while it was stopped (state T)")
        );
    }

    #[test]
    fn cpu_time_is_utime_plus_stime_even_with_a_parenthesis_in_the_name() {
        let stat = "4242 (core dns) x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 75 0 0 20 0 12 0 999 0 0";
        assert_eq!(cpu_ticks_in_stat(stat), Some(325));
        assert_eq!(cpu_ticks_in_stat("4242 (coredns) S 1"), None);
    }

    #[test]
    fn this_process_cpu_time_and_sockets_are_read_from_proc() {
        let pid = std::process::id();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        assert!(cpu_ticks_in_stat(&stat).is_some(), "{stat}");
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = socket.local_addr().unwrap().port();
        let bound = std::fs::read_to_string("/proc/thread-self/net/udp").unwrap();
        let inode: u64 = bound
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(&format!("0100007F:{port:04X}")))
            .and_then(|l| l.split_whitespace().nth(9)?.parse().ok())
            .unwrap();
        assert!(node_base::sockets::socket_inodes(pid).unwrap().contains(&inode));
        assert!(!stopped_in_stat(&stat), "{stat}");
    }

    #[test]
    fn a_process_stopped_with_sigstop_reads_as_stopped_and_continued_as_not() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let stat = || std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let until = |want: bool| {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while stopped_in_stat(&stat()) != want {
                assert!(std::time::Instant::now() < deadline, "{}", stat());
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        until(false);
        let signal = |sig| nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig);
        signal(nix::sys::signal::Signal::SIGSTOP).unwrap();
        until(true);
        signal(nix::sys::signal::Signal::SIGCONT).unwrap();
        until(false);
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
