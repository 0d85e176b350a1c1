//! The built supervisor answers a CoreDNS crash itself, without exiting: the real CoreDNS (the
//! binary the lab builds) under the real supervisor, in a fresh network namespace with the listener
//! addresses on `lo`, killed with SIGKILL again and again; after each kill both listeners answer
//! the health name again — with a runtime directory, from the warm standby CoreDNS that took over
//! (its pid; the standby's `oom_score_adj` is 1000, the one that took over has the supervisor's),
//! without one from a new CoreDNS — under the same supervisor. The time from each kill
//! until both answer is printed (min/median/max; the figures are in docs/perf.md). A hung CoreDNS
//! with lookups coming is killed by the supervisor and the standby takes over: stopped with SIGSTOP
//! (state `T`), once they wait on its sockets at two looks; stopped by a tracer the way a debugger
//! does (state `t`, every thread), once they waited 1 s while it used no CPU; with that rule off,
//! after three failed checks in a row. A CoreDNS that cannot start again (its Corefile broken meanwhile) is tried three times,
//! then ends the supervisor with CoreDNS's exit status, for systemd to restart the unit — with a
//! standby too, whose reload of the broken Corefile fails first. With the fallback Corefile, a
//! Corefile CoreDNS refuses — at the start, or broken while CoreDNS runs — is replaced by the
//! fallback: both listeners answer, and every status line says degraded and why. A reload
//! (SIGHUP) hands the listeners to a CoreDNS on the new Corefile under the same supervisor, every
//! query but in-flight ones answered; one CoreDNS refuses leaves the one before serving, degraded,
//! also for the CoreDNS that replaces it after a crash; one that works ends the degraded state and
//! the fallback.
//!
//! Needs root (a network namespace, `ip`) and CoreDNS (`harness images build`, or
//! `$LOCALDNS_TEST_COREDNS`).

mod coredns_support;

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agent::corefile::HEALTH_NAME;
use agent::goal::LocalDnsGoal;
use coredns_support::{Kill, dns_rcode, find_coredns, local_dns_goal};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

static SUPERVISOR: std::sync::LazyLock<std::path::PathBuf> =
    std::sync::LazyLock::new(|| agent::test_binary!("unbounded-localdns-supervisor"));
/// Kills in a row (the fault scenario's count).
const KILLS: usize = 20;
/// Past this, DNS is not coming back: the test fails (a bound for a broken supervisor, not a
/// performance target).
const GIVE_UP: Duration = Duration::from_secs(30);

/// The supervisor with its CoreDNS, in this thread's fresh network namespace.
struct Supervised {
    goal: LocalDnsGoal,
    dir: tempfile::TempDir,
    notify: UnixDatagram,
    supervisor: Kill,
    /// The notification [`Supervised::until_notified`] found last.
    last_notified: std::cell::RefCell<Option<String>>,
    /// The `READY=1` notification.
    ready: std::cell::RefCell<String>,
}

/// With or without the fallback Corefile (`LOCALDNS_FALLBACK_COREFILE`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fallback {
    None,
    Rendered,
}

/// The supervisor is killed with SIGKILL when the test ends (`Kill`); its CoreDNS goes first, or
/// it would outlive the test (under systemd the unit's cgroup takes both).
impl Drop for Supervised {
    fn drop(&mut self) {
        for pid in self.children() {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// With or without the warm standby (a runtime directory, as systemd's `RuntimeDirectory=` gives).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Standby {
    On,
    Off,
}

/// The first line of the standby's placeholder Corefile.
const PLACEHOLDER: &str = "# The LocalDNS supervisor's warm standby";

impl Supervised {
    /// A supervisor in this thread's fresh network namespace, its listener addresses on `lo`.
    fn start(standby: Standby) -> Supervised {
        Supervised::start_with(standby, &[])
    }

    /// [`Supervised::start`] with more environment for the supervisor.
    fn start_with(standby: Standby, env: &[(&str, &str)]) -> Supervised {
        if let Err(err) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET) {
            panic!("unshare(CLONE_NEWNET) failed ({err}): this test needs root");
        }
        let goal = local_dns_goal("defaults");
        Supervised::on_lo(&goal);
        Supervised::spawn(goal, standby, env)
    }

    /// `lo` up with the goal's listener and metrics addresses.
    fn on_lo(goal: &LocalDnsGoal) {
        let run = |args: &[&str]| agent::exec::run(Command::new("ip").args(args)).unwrap();
        run(&["link", "set", "lo", "up"]);
        let mut addrs = vec![goal.node_listener.addr(), goal.cluster_listener.addr()];
        addrs.push(*goal.metrics_address.socket_addr().ip());
        addrs.dedup();
        for a in addrs.iter().filter(|a| !a.is_loopback()) {
            run(&["addr", "add", &format!("{a}/32"), "dev", "lo"]);
        }
    }

    /// A supervisor for `goal` in this thread's network namespace, with a directory of its own.
    fn spawn(goal: LocalDnsGoal, standby: Standby, env: &[(&str, &str)]) -> Supervised {
        Supervised::spawn_args(goal, standby, env, &[])
    }

    /// [`Supervised::spawn`] with arguments (`spare <dir>`).
    fn spawn_args(goal: LocalDnsGoal, standby: Standby, env: &[(&str, &str)], args: &[&str]) -> Supervised {
        Supervised::spawn_full(goal, standby, env, args, None, Fallback::None)
    }

    /// A supervisor with a standby in this thread's fresh network namespace whose Corefile is
    /// `corefile`, with or without the fallback Corefile; `READY=1` is awaited and its
    /// notification returned.
    fn start_refusing(corefile: &str, fallback: Fallback) -> (Supervised, String) {
        if let Err(err) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET) {
            panic!("unshare(CLONE_NEWNET) failed ({err}): this test needs root");
        }
        let goal = local_dns_goal("defaults");
        Supervised::on_lo(&goal);
        let s = Supervised::spawn_full(goal, Standby::On, &[], &[], Some(corefile), fallback);
        let ready = s.ready.take();
        (s, ready)
    }

    /// [`Supervised::spawn_args`] whose Corefile is `corefile_text` (the goal's rendered one when
    /// `None`), with or without the fallback Corefile.
    fn spawn_full(
        goal: LocalDnsGoal,
        standby: Standby,
        env: &[(&str, &str)],
        args: &[&str],
        corefile_text: Option<&str>,
        fallback: Fallback,
    ) -> Supervised {
        let dir = tempfile::tempdir().unwrap();
        let corefile = dir.path().join("Corefile");
        let text = match corefile_text {
            Some(text) => text.to_owned(),
            None => agent::render::corefile::render(&goal).unwrap(),
        };
        std::fs::write(&corefile, text).unwrap();
        let fallback_corefile = dir.path().join("Corefile.fallback");
        if fallback == Fallback::Rendered {
            std::fs::write(
                &fallback_corefile,
                agent::render::corefile::render_fallback(&goal).unwrap(),
            )
            .unwrap();
        }
        let notify_path = dir.path().join("notify.sock");
        let notify = UnixDatagram::bind(&notify_path).unwrap();
        let mut cmd = Command::new(&*SUPERVISOR);
        cmd.args(args).env_clear().env("PATH", "/usr/bin:/bin");
        for line in agent::render::machine::environment(&goal).lines() {
            if let Some((k, v)) = line.split_once('=').filter(|_| !line.starts_with('#')) {
                cmd.env(k, v);
            }
        }
        let log = std::fs::File::create(dir.path().join("supervisor.log")).unwrap();
        if standby == Standby::On {
            let run = dir.path().join("run");
            std::fs::create_dir(&run).unwrap();
            cmd.env("RUNTIME_DIRECTORY", &run);
        }
        cmd.envs(env.iter().copied());
        match fallback {
            Fallback::None => cmd.env_remove("LOCALDNS_FALLBACK_COREFILE"),
            Fallback::Rendered => cmd.env("LOCALDNS_FALLBACK_COREFILE", &fallback_corefile),
        };
        cmd.env("LOCALDNS_COREFILE", &corefile)
            .env("LOCALDNS_COREDNS", find_coredns())
            .env("NOTIFY_SOCKET", &notify_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        let supervised = Supervised {
            goal,
            notify,
            supervisor: Kill(cmd.spawn().unwrap()),
            dir,
            last_notified: std::cell::RefCell::new(None),
            ready: std::cell::RefCell::new(String::new()),
        };
        supervised.until_notified("READY=1", Duration::from_secs(90));
        *supervised.ready.borrow_mut() = supervised.last_notified.take().unwrap_or_default();
        if standby == Standby::On {
            supervised.until_standby_ready();
        }
        supervised
    }

    /// Waits for the supervisor's status that a standby answers on its placeholder.
    fn until_standby_ready(&self) {
        self.until_notified("ready", Duration::from_secs(60));
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("supervisor.log")).unwrap_or_default()
    }

    /// Waits for a notification containing `needle`; returns the ones before it.
    fn until_notified(&self, needle: &str, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            self.notify.set_read_timeout(Some(left)).unwrap();
            let Ok(n) = self.notify.recv(&mut buf) else { break };
            let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
            if msg.contains(needle) {
                *self.last_notified.borrow_mut() = Some(msg);
                return seen;
            }
            seen.push(msg);
        }
        panic!(
            "no {needle} within {timeout:?}; notified: {seen:?}\n{}",
            self.log()
        );
    }

    fn supervisor(&mut self) -> &mut Child {
        &mut self.supervisor.0
    }

    /// The supervisor's child processes.
    fn children(&self) -> Vec<i32> {
        let pid = self.supervisor.0.id();
        let mut children = Vec::new();
        for task in std::fs::read_dir(format!("/proc/{pid}/task"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            children.extend(text.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
        }
        children
    }

    /// Whether child `pid` is the standby: its `-conf` file holds the placeholder.
    fn is_standby(pid: i32) -> bool {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        args.iter()
            .position(|a| *a == b"-conf")
            .and_then(|i| args.get(i + 1))
            .and_then(|conf| std::fs::read_to_string(String::from_utf8_lossy(conf).as_ref()).ok())
            .is_some_and(|text| text.starts_with(PLACEHOLDER))
    }

    /// Whether child `pid` runs CoreDNS already: a child the supervisor just forked shows the
    /// supervisor's command line until it execs.
    fn runs_coredns(pid: i32) -> bool {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .unwrap_or_default()
            .split(|b| *b == 0)
            .any(|a| a == b"-conf")
    }

    /// The supervisor's active CoreDNS: its one child running CoreDNS that is not the standby
    /// (asked again for up to 5 s while a child just forked has not exec'd yet).
    fn coredns_pid(&self) -> i32 {
        let started = Instant::now();
        loop {
            let active: Vec<i32> = self
                .children()
                .into_iter()
                .filter(|p| !Self::is_standby(*p))
                .collect();
            if let [one] = active.as_slice() {
                return *one;
            }
            let settling = active.iter().any(|p| !Self::runs_coredns(*p));
            if !settling || started.elapsed() > Duration::from_secs(5) {
                panic!(
                    "the supervisor's active CoreDNS children: {active:?} (all: {:?})\n{}",
                    self.children(),
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The supervisor's standby CoreDNS.
    fn standby_pid(&self) -> i32 {
        let standby: Vec<i32> = self
            .children()
            .into_iter()
            .filter(|p| Self::is_standby(*p))
            .collect();
        assert_eq!(standby.len(), 1, "standby children: {standby:?}\n{}", self.log());
        standby[0]
    }

    /// `GET /metrics` at the metrics address: CoreDNS's series and the supervisor's.
    fn scrape(&self) -> String {
        use std::io::{Read, Write};
        let addr = std::net::SocketAddr::V4(self.goal.metrics_address.socket_addr());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let got = (|| -> std::io::Result<String> {
                let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
                s.set_read_timeout(Some(Duration::from_secs(5)))?;
                write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
                let mut out = String::new();
                s.read_to_string(&mut out)?;
                Ok(out)
            })();
            match got {
                Ok(text) if text.starts_with("HTTP/1.0 200") || text.starts_with("HTTP/1.1 200") => {
                    return text;
                }
                other => assert!(
                    Instant::now() < deadline,
                    "no metrics at {addr}: {other:?}\n{}",
                    self.log()
                ),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Whether both listeners answer the health name now (rcode 0 within 100 ms each).
    fn both_answer(&self) -> bool {
        [self.goal.node_listener.addr(), self.goal.cluster_listener.addr()]
            .into_iter()
            .all(|l| matches!(dns_rcode(l, HEALTH_NAME, Duration::from_millis(100)), Ok(0)))
    }

    /// SIGKILL to CoreDNS; the time until both listeners answer again.
    fn kill_coredns_and_time_recovery(&mut self) -> (i32, Duration) {
        let pid = self.coredns_pid();
        kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
        let killed = Instant::now();
        // The listeners stop answering once the process is gone.
        while Path::new(&format!("/proc/{pid}/cmdline")).exists()
            && std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        while !self.both_answer() {
            assert!(
                killed.elapsed() < GIVE_UP,
                "DNS not back {GIVE_UP:?} after CoreDNS {pid} was killed\n{}",
                self.log()
            );
            if let Some(status) = self.supervisor().try_wait().unwrap() {
                panic!(
                    "the supervisor exited ({status}) after CoreDNS was killed\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        (pid, killed.elapsed())
    }
}

/// The `oom_score_adj` of process `pid`.
fn oom_score_adj(pid: u32) -> i32 {
    agent::supervisor::oom_score::read(Some(pid)).unwrap()
}

/// Kills CoreDNS `KILLS` times and prints the recovery times; with the standby on, each kill is
/// answered by the standby that was ready (its pid becomes the active one), without it by a new
/// CoreDNS.
fn kill_again_and_again(standby: Standby) {
    let mut s = Supervised::start(standby);
    assert!(s.both_answer(), "not answering after READY=1\n{}", s.log());
    let supervisor_pid = s.supervisor.0.id();
    let mut times = Vec::new();
    for _ in 0..KILLS {
        let ready = (standby == Standby::On).then(|| s.standby_pid());
        let (pid, took) = s.kill_coredns_and_time_recovery();
        times.push(took);
        // The supervisor saw it healthy too (`/ready` as well), before the next kill.
        s.until_notified("STATUS=CoreDNS healthy again", GIVE_UP);
        let now = s.coredns_pid();
        assert_ne!(now, pid, "{}", s.log());
        if let Some(ready) = ready {
            assert_eq!(
                now,
                ready,
                "the standby {ready} should have taken over\n{}",
                s.log()
            );
            s.until_standby_ready();
            assert_ne!(s.standby_pid(), ready, "{}", s.log());
            // The idle standby goes first at the memory limit; the one that took over no longer.
            let supervisor_adj = oom_score_adj(supervisor_pid);
            assert_eq!(oom_score_adj(now as u32), supervisor_adj, "{}", s.log());
            assert_eq!(
                oom_score_adj(s.standby_pid() as u32),
                agent::supervisor::oom_score::STANDBY,
                "{}",
                s.log()
            );
        }
        assert_eq!(s.supervisor.0.id(), supervisor_pid);
        assert!(s.supervisor().try_wait().unwrap().is_none(), "{}", s.log());
    }
    let log = s.log();
    let how = match standby {
        Standby::On => "CoreDNS exited; the standby takes over",
        Standby::Off => "CoreDNS exited; starting it again",
    };
    assert_eq!(
        log.matches(how).count(),
        KILLS,
        "one {how:?} logged per kill:\n{log}"
    );
    // The supervisor's series count every kill, beside CoreDNS's own.
    let metrics = s.scrape();
    let takeovers = if standby == Standby::On { KILLS } else { 0 };
    for line in [
        format!("localdns_supervisor_coredns_restarts_total {KILLS}\n"),
        format!("localdns_supervisor_standby_takeovers_total {takeovers}\n"),
        "localdns_supervisor_fallback 0\n".to_string(),
        "localdns_supervisor_coredns_metrics_up 1\n".to_string(),
        "coredns_build_info{".to_string(),
        "localdns_supervisor_last_recovery_seconds ".to_string(),
    ] {
        assert!(metrics.contains(&line), "{line:?} not in the metrics:\n{metrics}");
    }
    times.sort();
    eprintln!(
        "CoreDNS SIGKILLed {KILLS} times ({}): both listeners answered again after min {:.0?}, median {:.0?}, \
         max {:.0?} (all: {:?})",
        if standby == Standby::On {
            "the standby took over"
        } else {
            "no standby: started again"
        },
        times[0],
        times[KILLS / 2],
        times[KILLS - 1],
        times.iter().map(|t| t.as_millis()).collect::<Vec<_>>()
    );
}

#[test]
fn coredns_killed_twenty_times_is_answered_by_the_warm_standby_under_the_same_supervisor() {
    kill_again_and_again(Standby::On);
}

#[test]
fn without_a_standby_coredns_killed_twenty_times_is_started_again_by_the_same_supervisor() {
    kill_again_and_again(Standby::Off);
}

/// The Corefile broken while CoreDNS runs, then CoreDNS killed: every start fails; the third
/// failure ends the supervisor with CoreDNS's status. With the standby, its reload of the broken
/// Corefile fails first (it keeps its placeholder) and is given up after the take-over timeout.
fn a_coredns_that_cannot_start_again(standby: Standby) {
    let mut s = Supervised::start(standby);
    let corefile: PathBuf = s.dir.path().join("Corefile");
    std::fs::write(&corefile, ".:53 {\n    no-such-plugin\n}\n").unwrap();
    let pid = s.coredns_pid();
    kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    let deadline = Instant::now() + GIVE_UP;
    let status = loop {
        if let Some(status) = s.supervisor().try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the supervisor kept running\n{}",
            s.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = s.log();
    assert_eq!(
        status.code(),
        Some(1),
        "CoreDNS's exit code (a bad Corefile):\n{log}"
    );
    match standby {
        Standby::On => {
            assert!(log.contains("CoreDNS exited; the standby takes over"), "{log}");
            assert!(log.contains("the standby that took over is not healthy"), "{log}");
        }
        Standby::Off => assert!(log.contains("CoreDNS exited; starting it again"), "{log}"),
    }
    // Started three times in all; the third exit ends it.
    assert_eq!(
        log.matches("CoreDNS exited again before it was healthy; starting it again")
            .count(),
        2,
        "{log}"
    );
    assert!(log.contains("CoreDNS exited before it became healthy"), "{log}");
}

#[test]
fn a_coredns_that_cannot_start_again_ends_the_supervisor_with_its_status() {
    a_coredns_that_cannot_start_again(Standby::Off);
}

#[test]
fn a_standby_that_cannot_take_over_is_given_up_and_the_supervisor_ends_with_coredns_status() {
    a_coredns_that_cannot_start_again(Standby::On);
}

/// The defaults' rendered Corefile with a `cache` property CoreDNS does not know: the agent's
/// checks pass it (they do not read plugin properties), CoreDNS refuses it at its start.
fn refused_corefile() -> String {
    let goal = local_dns_goal("defaults");
    let text = agent::render::corefile::render(&goal).unwrap();
    let refused = text.replacen(
        "    cache 30 {\n",
        "    cache 30 {\n        no_such_property 1\n",
        1,
    );
    assert_ne!(
        refused, text,
        "the rendered Corefile has no `cache 30 {{`:\n{text}"
    );
    agent::corefile::check(&refused, &agent::render::corefile::context(&goal))
        .expect("the agent's checks pass the refused Corefile");
    refused
}

/// The `-conf` file of CoreDNS `pid`.
fn conf_of(pid: i32) -> PathBuf {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let at = args
        .iter()
        .position(|a| *a == b"-conf")
        .expect("CoreDNS runs with -conf");
    PathBuf::from(String::from_utf8_lossy(args[at + 1]).into_owned())
}

/// The fallback serves: both listeners answer, the active CoreDNS reads the fallback Corefile,
/// the supervisor runs.
fn ensure_the_fallback_serves(s: &mut Supervised) {
    let deadline = Instant::now() + GIVE_UP;
    while !s.both_answer() {
        assert!(
            Instant::now() < deadline,
            "the listeners do not answer\n{}",
            s.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let conf = conf_of(s.coredns_pid());
    assert_eq!(conf, s.dir.path().join("Corefile.fallback"), "{}", s.log());
    assert!(s.supervisor().try_wait().unwrap().is_none(), "{}", s.log());
}

#[test]
fn a_corefile_coredns_refuses_at_the_start_is_replaced_by_the_fallback_and_the_status_says_why() {
    let (mut s, ready) = Supervised::start_refusing(&refused_corefile(), Fallback::Rendered);
    let status = ready
        .lines()
        .find_map(|l| l.strip_prefix("STATUS="))
        .unwrap_or_default()
        .to_owned();
    assert!(
        status.starts_with("degraded (serving the fallback Corefile: CoreDNS refused ")
            && status.contains("no_such_property")
            && status.contains("CoreDNS healthy on"),
        "READY=1's status: {ready:?}\n{}",
        s.log()
    );
    ensure_the_fallback_serves(&mut s);
    let metrics = s.scrape();
    assert!(
        metrics.contains("localdns_supervisor_fallback 1\n") && metrics.contains("coredns_build_info{"),
        "the metrics should say the fallback serves:\n{metrics}"
    );
    // CoreDNS's own words reach the journal as before.
    let log = s.log();
    assert!(
        log.contains("plugin/cache") && log.contains("no_such_property"),
        "{log}"
    );
    // The standby's status (once it is ready) keeps saying it.
    let standby = s.last_notified.take().unwrap_or_default();
    assert!(standby.contains("standby CoreDNS"), "{standby:?}");
    assert!(
        standby.contains("STATUS=degraded (serving the fallback Corefile"),
        "{standby:?}"
    );
}

#[test]
fn a_corefile_broken_while_coredns_runs_is_answered_by_the_fallback_under_the_same_supervisor() {
    let (mut s, ready) = Supervised::start_refusing(
        &agent::render::corefile::render(&local_dns_goal("defaults")).unwrap(),
        Fallback::Rendered,
    );
    assert!(!ready.contains("degraded"), "{ready:?}");
    std::fs::write(s.dir.path().join("Corefile"), refused_corefile()).unwrap();
    let pid = s.coredns_pid();
    kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    // The standby's reload fails (the take-over timeout), CoreDNS is started three times, then
    // the fallback serves.
    s.until_notified(
        "STATUS=degraded (serving the fallback Corefile: CoreDNS refused",
        Duration::from_secs(90),
    );
    ensure_the_fallback_serves(&mut s);
    let log = s.log();
    assert!(log.contains("the standby that took over is not healthy"), "{log}");
    assert_eq!(
        log.matches("CoreDNS exited again before it was healthy; starting it again")
            .count(),
        2,
        "{log}"
    );
}

/// How the supervisor finds a hung CoreDNS.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum HungBy {
    /// SIGSTOP; queries wait on its listener sockets at two looks while it is stopped (state `T`).
    WaitingOnAStoppedProcess,
    /// Every thread stopped by a tracer (state `t`, as under a debugger); queries wait on its
    /// listener sockets for 1 s while it uses no CPU.
    WaitingWithNoCpuUsed,
    /// SIGSTOP, the queue rule off (`LOCALDNS_STUCK_AFTER_MS=0`): three failed health checks in a
    /// row.
    FailedChecks,
    /// SIGSTOP and no lookups: the query of the supervisor's own next health check waits on the
    /// stopped CoreDNS, and the looks, which go on while that check waits for its answer, find it
    /// before the check gives up (no `health check failed`).
    ItsOwnHealthCheck,
}

/// Stops every thread of `pid` the way a debugger does (`PTRACE_SEIZE` + `PTRACE_INTERRUPT`:
/// state `t`, not `T`) from a thread that stays their tracer and collects their stops until they
/// exit (the supervisor's SIGKILL), so that the supervisor can reap CoreDNS after.
fn stop_as_a_debugger(pid: i32) {
    use nix::sys::ptrace;
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    let (seized, stopped) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut traced = std::collections::BTreeSet::new();
        // Threads started meanwhile are caught by the next pass; a stopped one starts none.
        loop {
            let tasks: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
                .unwrap()
                .filter_map(|t| t.ok()?.file_name().to_str()?.parse().ok())
                .filter(|tid| !traced.contains(tid))
                .collect();
            if tasks.is_empty() {
                break;
            }
            for tid in tasks {
                let task = Pid::from_raw(tid);
                // A thread that ended since it was listed is not waited for (its wait fails).
                if ptrace::seize(task, ptrace::Options::empty()).is_ok() {
                    let _ = ptrace::interrupt(task);
                }
                traced.insert(tid);
            }
        }
        seized.send(()).unwrap();
        // The leader (tid = pid) last: its exit is reported once the other threads are reaped.
        let (leader, others): (Vec<i32>, Vec<i32>) = traced.into_iter().partition(|tid| *tid == pid);
        for tid in others.into_iter().chain(leader) {
            while let Ok(status) = waitpid(Pid::from_raw(tid), Some(WaitPidFlag::__WALL)) {
                if matches!(status, WaitStatus::Exited(..) | WaitStatus::Signaled(..)) {
                    break;
                }
            }
        }
    });
    stopped.recv().unwrap();
    until_every_thread_reads(pid, "t");
}

/// Waits until every thread of `pid` shows `state` in its `/proc/<pid>/task/<tid>/stat` (a stop
/// takes effect when each thread next runs).
fn until_every_thread_reads(pid: i32, state: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let states: Vec<(String, String)> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter_map(|task| {
                let tid = task.ok()?.file_name().into_string().ok()?;
                let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
                let now = stat[stat.rfind(')')? + 1..]
                    .split_whitespace()
                    .next()?
                    .to_string();
                Some((tid, now))
            })
            .collect();
        if states.iter().all(|(_, now)| now == state) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not every thread of CoreDNS {pid} reads {state}: {states:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The serving CoreDNS hung while lookups keep coming (every 20 ms, as the clients of a node):
/// the supervisor kills it and the standby takes over, found by `by`.
fn a_hung_coredns(by: HungBy) {
    let env: &[(&str, &str)] = match by {
        HungBy::FailedChecks => &[("LOCALDNS_STUCK_AFTER_MS", "0")],
        _ => &[],
    };
    let mut s = Supervised::start_with(Standby::On, env);
    assert!(s.both_answer(), "not answering after READY=1\n{}", s.log());
    let supervisor_pid = s.supervisor.0.id();
    let pid = s.coredns_pid();
    let standby = s.standby_pid();
    // The process lives on, its sockets stay bound, nothing answers.
    match by {
        HungBy::WaitingWithNoCpuUsed => stop_as_a_debugger(pid),
        _ => {
            kill(Pid::from_raw(pid), Signal::SIGSTOP).unwrap();
            until_every_thread_reads(pid, "T");
        }
    }
    let hung = Instant::now();
    // The first failing regular check comes within one interval (12 s without a watchdog), then
    // the rechecks; past that plus the start, the supervisor did not act.
    let bound = Duration::from_secs(12) + GIVE_UP;
    if by == HungBy::ItsOwnHealthCheck {
        s.until_notified("STATUS=CoreDNS healthy again", bound);
    } else {
        assert!(!s.both_answer(), "a stopped CoreDNS still answered\n{}", s.log());
    }
    while !s.both_answer() {
        assert!(
            hung.elapsed() < bound,
            "DNS not back {bound:?} after CoreDNS {pid} was stopped\n{}",
            s.log()
        );
        if let Some(status) = s.supervisor().try_wait().unwrap() {
            panic!("the supervisor exited ({status}) with CoreDNS hung\n{}", s.log());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = hung.elapsed();
    if by != HungBy::ItsOwnHealthCheck {
        s.until_notified("STATUS=CoreDNS healthy again", GIVE_UP);
    }
    assert_eq!(
        s.coredns_pid(),
        standby,
        "the answers should come from the standby that took over\n{}",
        s.log()
    );
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "the hung CoreDNS {pid} is still there\n{}",
        s.log()
    );
    assert_eq!(s.supervisor.0.id(), supervisor_pid);
    assert!(s.supervisor().try_wait().unwrap().is_none(), "{}", s.log());
    let log = s.log();
    let rules = [
        (
            HungBy::WaitingOnAStoppedProcess,
            "on CoreDNS's listener sockets while it was stopped (state T): taking it for hung, killing it"
                .to_string(),
        ),
        (
            HungBy::WaitingWithNoCpuUsed,
            "on CoreDNS's listener sockets while it used no CPU: taking it for hung, killing it".to_string(),
        ),
        (
            HungBy::FailedChecks,
            format!(
                "CoreDNS failed {} health checks in a row: taking it for hung, killing it",
                agent::supervisor::settings::DEFAULT_HUNG_AFTER_FAILED_CHECKS
            ),
        ),
    ];
    let expected = match by {
        HungBy::ItsOwnHealthCheck => HungBy::WaitingOnAStoppedProcess,
        by => by,
    };
    for (rule, line) in rules {
        let said = rule == expected;
        assert_eq!(log.contains(&line), said, "{by:?}: {line:?} said: {said}\n{log}");
    }
    if by == HungBy::ItsOwnHealthCheck {
        assert!(
            !log.contains("health check failed"),
            "the looks should find the stopped CoreDNS while the check waits on it\n{log}"
        );
    }
    assert_eq!(
        log.matches("CoreDNS exited; the standby takes over").count(),
        1,
        "{log}"
    );
    eprintln!(
        "CoreDNS hung, found by {by:?}: both listeners answered the standby that took over after {took:.1?}"
    );
}

#[test]
fn a_stopped_coredns_that_clients_wait_on_is_killed_and_the_standby_takes_over_under_the_same_supervisor() {
    a_hung_coredns(HungBy::WaitingOnAStoppedProcess);
}

#[test]
fn a_coredns_that_clients_wait_on_and_that_uses_no_cpu_is_killed_and_the_standby_takes_over() {
    a_hung_coredns(HungBy::WaitingWithNoCpuUsed);
}

#[test]
fn a_stopped_coredns_nobody_asks_is_found_by_the_query_of_the_supervisors_own_health_check() {
    a_hung_coredns(HungBy::ItsOwnHealthCheck);
}

#[test]
fn without_the_queue_rule_a_hung_coredns_is_killed_after_three_failed_checks() {
    a_hung_coredns(HungBy::FailedChecks);
}

/// The bridge of a planned restart (`localdns-bridge.service`, `agent::start::localdns_restart`):
/// a second supervisor with the same environment and Corefile and no standby starts beside the
/// running one; their CoreDNS share the listeners (`SO_REUSEPORT`: two UDP and two TCP sockets on
/// each, which the agent waits for), and while the first supervisor stops (SIGTERM, as systemd
/// stops a unit) every lookup of both listeners is answered, by the bridge at the end.
#[test]
fn a_bridge_supervisor_shares_the_listeners_and_answers_while_the_first_stops() {
    use agent::start::localdns_restart::wait_bound;

    let mut first = Supervised::start(Standby::Off);
    let listeners = [
        first.goal.node_listener.addr(),
        first.goal.cluster_listener.addr(),
    ];
    wait_bound(&listeners, 1, Duration::from_secs(10)).unwrap();
    let bridge = Supervised::spawn(first.goal.clone(), Standby::Off, &[]);
    wait_bound(&listeners, 2, Duration::from_secs(30)).unwrap_or_else(|e| {
        panic!(
            "the bridge's CoreDNS did not bind beside the first: {e}\n{}",
            bridge.log()
        )
    });

    let asking = Asking::start(listeners);
    std::thread::sleep(Duration::from_millis(500));
    let pid = Pid::from_raw(first.supervisor.0.id() as i32);
    kill(pid, Signal::SIGTERM).unwrap();
    let status = first.supervisor().wait().unwrap();
    let held = || {
        let bound = agent::sockets::bound_sockets().unwrap();
        agent::sockets::held_on(&bound, listeners[0], agent::corefile::DNS_PORT)
    };
    // Its CoreDNS went with it (the supervisor stops it; systemd would kill what is left).
    let stopped = Instant::now();
    while held() != (1, 1) {
        assert!(
            stopped.elapsed() < GIVE_UP,
            "the first CoreDNS's sockets stayed\n{}",
            first.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(1));
    let (lookups, failed) = asking.finish();
    assert!(lookups > 0, "no lookups were made");
    assert!(
        failed.is_empty(),
        "{} of {lookups} lookups got no answer while the first supervisor stopped ({status}): {failed:?}\n{}\n{}",
        failed.len(),
        first.log(),
        bridge.log()
    );
    assert!(bridge.both_answer(), "{}", bridge.log());
    eprintln!("{lookups} lookups while the first supervisor stopped ({status}), all answered");
}

/// A planned restart onto a Corefile CoreDNS refuses: the bridge supervisor's CoreDNS exits at
/// once while the first CoreDNS answers on the same listeners. The bridge counts only its own
/// CoreDNS's sockets, so it is not fooled by the first one's answers: it serves the fallback
/// beside the first, says degraded, and does not spin starting CoreDNS again.
#[test]
fn a_bridge_onto_a_refused_corefile_serves_the_fallback_beside_the_first() {
    use agent::start::localdns_restart::wait_bound;

    let first = Supervised::start(Standby::Off);
    let listeners = [
        first.goal.node_listener.addr(),
        first.goal.cluster_listener.addr(),
    ];
    wait_bound(&listeners, 1, Duration::from_secs(10)).unwrap();
    let mut bridge = Supervised::spawn_full(
        first.goal.clone(),
        Standby::Off,
        &[],
        &[],
        Some(&refused_corefile()),
        Fallback::Rendered,
    );
    let ready = bridge.ready.take();
    assert!(
        ready.contains("STATUS=degraded (serving the fallback Corefile: CoreDNS refused"),
        "the bridge's READY=1: {ready:?}\n{}",
        bridge.log()
    );
    wait_bound(&listeners, 2, Duration::from_secs(30)).unwrap_or_else(|e| {
        panic!(
            "the bridge's fallback did not bind beside the first: {e}\n{}",
            bridge.log()
        )
    });
    let pid = bridge.coredns_pid();
    assert_eq!(
        conf_of(pid),
        bridge.dir.path().join("Corefile.fallback"),
        "{}",
        bridge.log()
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        bridge.coredns_pid(),
        pid,
        "the bridge started CoreDNS again\n{}",
        bridge.log()
    );
    assert!(
        !bridge.log().contains("CoreDNS exited; starting it again"),
        "{}",
        bridge.log()
    );
    assert!(
        bridge.supervisor().try_wait().unwrap().is_none(),
        "{}",
        bridge.log()
    );
}

/// Lookups of the health name on both listeners in a thread until [`Asking::finish`], each as a
/// stub resolver asks: two tries of a second each.
struct Asking {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<(u32, Vec<String>)>,
}

impl Asking {
    fn start(listeners: [std::net::Ipv4Addr; 2]) -> Asking {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let (mut lookups, mut failed) = (0u32, Vec::new());
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for l in listeners {
                        lookups += 1;
                        let answered = (0..2)
                            .any(|_| matches!(dns_rcode(l, HEALTH_NAME, Duration::from_secs(1)), Ok(0)));
                        if !answered {
                            failed.push(format!("lookup {lookups} of {l}"));
                        }
                    }
                }
                (lookups, failed)
            })
        };
        Asking { stop, thread }
    }

    /// Stops asking; how many lookups there were, and which got no answer.
    fn finish(self) -> (u32, Vec<String>) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// Waits until `supervised`'s log has `needle`.
fn until_logged(supervised: &Supervised, needle: &str, timeout: Duration) {
    let started = Instant::now();
    while !supervised.log().contains(needle) {
        assert!(
            started.elapsed() < timeout,
            "no {needle:?} in the log within {timeout:?}\n{}",
            supervised.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The spare (`localdns-spare.service`): a supervisor started as `spare <dir>` beside one whose
/// runtime directory is `<dir>`. The first supervisor SIGKILLed, then its CoreDNS and standby (as
/// `KillMode=mixed` has systemd do): the spare's standby takes over and both listeners answer;
/// a new supervisor in the same directory, once healthy, gets the listeners back (the spare stops
/// its CoreDNS: one UDP and one TCP socket on each listener), every lookup meanwhile answered;
/// that supervisor stopping on purpose (SIGTERM) makes the spare stand by without answering, it
/// connects to the next supervisor, and when that one stops and nothing comes back within the
/// hold limit (`LOCALDNS_SPARE_HOLD_SECS`, 3 s here) the spare exits 0.
#[test]
fn a_spare_answers_when_the_supervisor_dies_and_hands_back_when_it_is_back() {
    use agent::start::localdns_restart::wait_bound;
    use agent::supervisor::spare::{CONNECTED, HANDS_BACK, STANDS_BY, TAKES_OVER};

    let shared = tempfile::tempdir().unwrap();
    let shared_dir = shared.path().to_str().unwrap().to_owned();
    let mut first = Supervised::start_with(Standby::On, &[("RUNTIME_DIRECTORY", &shared_dir)]);
    let goal = first.goal.clone();
    let listeners = [goal.node_listener.addr(), goal.cluster_listener.addr()];
    let mut spare = Supervised::spawn_args(
        goal.clone(),
        Standby::On,
        &[("LOCALDNS_SPARE_HOLD_SECS", "3")],
        &["spare", &shared_dir],
    );
    until_logged(&spare, CONNECTED, Duration::from_secs(10));
    let held = || {
        let bound = agent::sockets::bound_sockets().unwrap();
        listeners.map(|l| agent::sockets::held_on(&bound, l, agent::corefile::DNS_PORT))
    };
    assert_eq!(held(), [(1, 1), (1, 1)], "before the kill\n{}", first.log());

    // As systemd does after the main process of a `KillMode=mixed` unit died: the rest of the
    // unit SIGKILLed right after.
    let orphans = first.children();
    kill(Pid::from_raw(first.supervisor.0.id() as i32), Signal::SIGKILL).unwrap();
    let killed = Instant::now();
    first.supervisor().wait().unwrap();
    for pid in orphans {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    while held() != [(1, 1), (1, 1)] || !spare.both_answer() {
        assert!(
            killed.elapsed() < GIVE_UP,
            "the spare did not answer within {GIVE_UP:?} of the supervisor's death (held {:?})\n{}",
            held(),
            spare.log()
        );
        if let Some(status) = spare.supervisor().try_wait().unwrap() {
            panic!("the spare exited ({status})\n{}", spare.log());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let took = killed.elapsed();
    let serving = spare.coredns_pid();
    assert!(spare.log().contains(TAKES_OVER), "{}", spare.log());
    eprintln!(
        "the supervisor SIGKILLed: both listeners answered the spare's CoreDNS {serving} after {took:?}"
    );

    let asking = Asking::start(listeners);
    let mut second = Supervised::spawn(goal.clone(), Standby::On, &[("RUNTIME_DIRECTORY", &shared_dir)]);
    until_logged(&spare, HANDS_BACK, Duration::from_secs(10));
    wait_bound(&listeners, 1, Duration::from_secs(10)).unwrap();
    let started = Instant::now();
    while held() != [(1, 1), (1, 1)] {
        assert!(
            started.elapsed() < GIVE_UP,
            "the spare's CoreDNS {serving} kept its sockets: {:?}\n{}",
            held(),
            spare.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    let (lookups, failed) = asking.finish();
    assert!(lookups > 0, "no lookups were made");
    assert!(
        failed.is_empty(),
        "{} of {lookups} lookups got no answer while the spare handed back: {failed:?}\n{}\n{}",
        failed.len(),
        spare.log(),
        second.log()
    );
    assert!(second.both_answer(), "{}", second.log());
    assert_ne!(second.coredns_pid(), serving);
    spare.until_standby_ready();

    // A stop on purpose: the spare stands by, answering nothing, and watches the next supervisor.
    kill(Pid::from_raw(second.supervisor.0.id() as i32), Signal::SIGTERM).unwrap();
    let status = second.supervisor().wait().unwrap();
    assert!(
        status.success(),
        "the second supervisor: {status}\n{}",
        second.log()
    );
    until_logged(&spare, STANDS_BY, Duration::from_secs(10));
    assert_eq!(held(), [(0, 0), (0, 0)], "{}", spare.log());
    assert_eq!(spare.log().matches(TAKES_OVER).count(), 1, "{}", spare.log());
    let mut third = Supervised::spawn(goal.clone(), Standby::Off, &[("RUNTIME_DIRECTORY", &shared_dir)]);
    let started = Instant::now();
    while spare.log().matches(CONNECTED).count() < 2 {
        assert!(
            started.elapsed() < GIVE_UP,
            "the spare did not connect to the third supervisor\n{}",
            spare.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Its status names its standby, ready all along, for `systemctl show -p StatusText`, and
    // never claimed the supervisor's words (its own standbys' ready lines say they are the spare's).
    let before = spare.until_notified(
        "watching the supervisor; standby CoreDNS",
        Duration::from_secs(10),
    );
    let claimed: Vec<_> = before
        .iter()
        .filter(|m| m.contains("CoreDNS healthy on"))
        .collect();
    assert!(
        claimed.is_empty(),
        "the spare's status read like the supervisor's: {claimed:?}"
    );

    // Stopped, and not back within the hold limit (3 s here): the spare exits 0.
    kill(Pid::from_raw(third.supervisor.0.id() as i32), Signal::SIGTERM).unwrap();
    third.supervisor().wait().unwrap();
    let stopped = Instant::now();
    let status = loop {
        if let Some(status) = spare.supervisor().try_wait().unwrap() {
            break status;
        }
        assert!(
            stopped.elapsed() < GIVE_UP,
            "the spare did not exit after the supervisor stayed away\n{}",
            spare.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "the spare: {status}\n{}", spare.log());
    assert!(
        spare
            .log()
            .contains("the supervisor has been gone for 3s: the spare stands down and exits"),
        "{}",
        spare.log()
    );
    assert_eq!(held(), [(0, 0), (0, 0)], "{}", spare.log());
}

/// The defaults' rendered Corefile with every query logged on the node listener's root zone.
fn logging_corefile() -> String {
    let mut goal = local_dns_goal("defaults");
    goal.node_zones[0].settings.query_logging = agent::zones::QueryLogging::Log;
    agent::render::corefile::render(&goal).unwrap()
}

/// Asks both listeners for the health name until `stop`, a query at a time (1 s each); returns
/// the number asked and the number unanswered.
fn ask_until(goal: &LocalDnsGoal, stop: &std::sync::atomic::AtomicBool) -> (usize, usize) {
    let (mut asked, mut unanswered) = (0, 0);
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        for l in [goal.node_listener.addr(), goal.cluster_listener.addr()] {
            asked += 1;
            if !matches!(dns_rcode(l, HEALTH_NAME, Duration::from_secs(1)), Ok(0)) {
                unanswered += 1;
            }
        }
    }
    (asked, unanswered)
}

/// SIGHUP (`systemctl reload` under `Type=notify-reload`); returns the notification that ends it
/// (`READY=1`), after `RELOADING=1`.
fn reload(s: &Supervised) -> String {
    kill(Pid::from_raw(s.supervisor.0.id() as i32), Signal::SIGHUP).unwrap();
    s.until_notified("RELOADING=1", Duration::from_secs(10));
    s.until_notified("READY=1", Duration::from_secs(90));
    s.last_notified.take().unwrap_or_default()
}

#[test]
fn a_reload_hands_the_listeners_to_a_coredns_on_the_new_corefile_under_the_same_supervisor() {
    if let Err(err) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET) {
        panic!("unshare(CLONE_NEWNET) failed ({err}): this test needs root");
    }
    let goal = local_dns_goal("defaults");
    Supervised::on_lo(&goal);
    let mut s = Supervised::spawn_full(goal, Standby::On, &[], &[], None, Fallback::Rendered);
    let before = s.coredns_pid();
    std::fs::write(s.dir.path().join("Corefile"), logging_corefile()).unwrap();

    let stop = std::sync::atomic::AtomicBool::new(false);
    let (ready, (asked, unanswered)) = std::thread::scope(|scope| {
        let asking = scope.spawn(|| ask_until(&s.goal, &stop));
        let ready = reload(&s);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        (ready, asking.join().unwrap())
    });
    eprintln!("figure: reload: {asked} queries during it, {unanswered} unanswered");
    assert!(
        ready.contains("STATUS=reloaded ") && !ready.contains("degraded"),
        "READY=1 of the reload: {ready:?}\n{}",
        s.log()
    );
    let after = s.coredns_pid();
    assert_ne!(
        after,
        before,
        "the same CoreDNS serves after the reload\n{}",
        s.log()
    );
    assert!(
        !Path::new(&format!("/proc/{before}/cmdline")).exists()
            || std::fs::read_to_string(format!("/proc/{before}/stat")).is_ok_and(|st| st.contains(") Z ")),
        "the CoreDNS before the reload ({before}) still runs\n{}",
        s.log()
    );
    assert!(s.supervisor().try_wait().unwrap().is_none(), "{}", s.log());
    // In-flight queries at the hand-over are all that may go unanswered.
    assert!(
        unanswered <= 2,
        "{unanswered} of {asked} queries unanswered during the reload\n{}",
        s.log()
    );

    // The new Corefile is in effect: the node listener logs its queries.
    let name = "reloaded.example.test";
    let _ = dns_rcode(s.goal.node_listener.addr(), name, Duration::from_secs(1));
    until_logged(&s, &format!("\"A IN {name}. udp"), Duration::from_secs(10));
    let metrics = s.scrape();
    assert!(
        metrics.contains("localdns_supervisor_reloads_total 1\n")
            && metrics.contains("localdns_supervisor_reloads_refused_total 0\n"),
        "{metrics}"
    );
}

#[test]
fn a_reload_coredns_refuses_leaves_the_one_before_serving_also_after_a_crash_and_a_good_one_ends_the_degraded_state()
 {
    if let Err(err) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET) {
        panic!("unshare(CLONE_NEWNET) failed ({err}): this test needs root");
    }
    let goal = local_dns_goal("defaults");
    Supervised::on_lo(&goal);
    let good = agent::render::corefile::render(&goal).unwrap();
    let mut s = Supervised::spawn_full(goal, Standby::On, &[], &[], None, Fallback::Rendered);
    let before = s.coredns_pid();

    std::fs::write(s.dir.path().join("Corefile"), refused_corefile()).unwrap();
    let ready = reload(&s);
    assert!(
        ready.contains("STATUS=degraded (reload refused, still serving ")
            && ready.contains("no_such_property"),
        "READY=1 of the refused reload: {ready:?}\n{}",
        s.log()
    );
    assert_eq!(
        s.coredns_pid(),
        before,
        "the CoreDNS before the refused reload should go on serving\n{}",
        s.log()
    );
    assert!(s.both_answer(), "{}", s.log());
    let metrics = s.scrape();
    for line in [
        "localdns_supervisor_reloads_refused_total 1\n",
        "localdns_supervisor_degraded 1\n",
        "localdns_supervisor_fallback 0\n",
    ] {
        assert!(metrics.contains(line), "{line:?} missing:\n{metrics}");
    }

    // A crash meanwhile: what comes back serves the Corefile before the reload, not the refused one.
    let (killed, took) = s.kill_coredns_and_time_recovery();
    let conf = std::fs::read_to_string(conf_of(s.coredns_pid())).unwrap();
    assert!(
        !conf.contains("no_such_property") && conf.contains("cache 30 {"),
        "after CoreDNS {killed} was killed, its successor reads:\n{conf}\n{}",
        s.log()
    );
    assert!(
        took < Duration::from_secs(10),
        "DNS back {took:?} after the kill\n{}",
        s.log()
    );

    std::fs::write(s.dir.path().join("Corefile"), &good).unwrap();
    let ready = reload(&s);
    assert!(
        ready.contains("STATUS=reloaded ") && !ready.contains("degraded"),
        "READY=1 of the good reload: {ready:?}\n{}",
        s.log()
    );
    assert_ne!(s.coredns_pid(), before, "{}", s.log());
    assert!(s.scrape().contains("localdns_supervisor_degraded 0\n"));
}

#[test]
fn a_reload_of_a_fixed_corefile_ends_the_fallback_under_the_same_supervisor() {
    let (mut s, _) = Supervised::start_refusing(&refused_corefile(), Fallback::Rendered);
    ensure_the_fallback_serves(&mut s);
    let good = agent::render::corefile::render(&s.goal).unwrap();
    std::fs::write(s.dir.path().join("Corefile"), good).unwrap();
    let ready = reload(&s);
    assert!(
        ready.contains("STATUS=reloaded ") && !ready.contains("degraded"),
        "READY=1 of the reload: {ready:?}\n{}",
        s.log()
    );
    assert_eq!(
        conf_of(s.coredns_pid()),
        s.dir.path().join("Corefile"),
        "{}",
        s.log()
    );
    assert!(s.both_answer(), "{}", s.log());
    assert!(s.supervisor().try_wait().unwrap().is_none(), "{}", s.log());
    let metrics = s.scrape();
    assert!(
        metrics.contains("localdns_supervisor_fallback 0\n")
            && metrics.contains("localdns_supervisor_degraded 0\n"),
        "{metrics}"
    );
}
