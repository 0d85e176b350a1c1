//! The warm standby: a second CoreDNS the supervisor keeps started while the first serves, so that
//! a crash is answered without starting a process. The standby serves only a placeholder (`whoami`
//! on a free loopback port, nothing on the listeners, so it takes no query and keeps no cache of
//! its own); once the active CoreDNS has exited, the real Corefile is written into the standby's
//! file and the standby is told to reload it (SIGUSR1: CoreDNS reads its file again inside the
//! running process). That skips the Go runtime's and the plugins' start, most of a CoreDNS start
//! under emulation (docs/localdns.md, "Crash recovery").
//!
//! The standby counts as ready when it printed its version banner (`CoreDNS-<version>`): CoreDNS
//! prints it once its servers run, after it installed its signal handlers (before that, SIGUSR1
//! would end it). Its output is read through a pipe and passed on to the supervisor's own, so the
//! journal keeps it; nothing asks the standby over the network (no conntrack entry of ours).
//! At the slice's memory limit the kernel kills the standby first ([`oom_score`]); a standby that
//! was SIGKILLed is started again only after [`AFTER_SIGKILL`], so that a slice short of memory
//! does not spend its CPU on standbys the kernel kills again while the serving CoreDNS struggles.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdout};
use tokio::time::Instant;

use super::{Settings, notify, oom_score};

/// How often a started standby is looked at for its banner.
const POLL: Duration = Duration::from_millis(100);
/// The start of the line CoreDNS prints once its servers run (`CoreDNS-1.15.0`).
const BANNER: &str = "CoreDNS-";
/// The longest pause before a standby is started again after it failed (doubling from 1 s).
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// The least pause before a standby is started again after one was SIGKILLed: the OOM killer's
/// first choice at the slice's limit would likely kill the next one too (each start costs a
/// CoreDNS start's CPU, 10–20 s under emulation, taken from the CoreDNS that serves).
pub const AFTER_SIGKILL: Duration = MAX_BACKOFF;

/// What the standby serves until it takes over: `whoami` on `at`, nothing else.
pub fn placeholder_corefile(at: SocketAddrV4) -> String {
    format!(
        "# The LocalDNS supervisor's warm standby: replaced by the real Corefile when this CoreDNS\n\
         # takes over from the active one.\n\
         .:{} {{\n    bind {}\n    whoami\n}}\n",
        at.port(),
        at.ip()
    )
}

/// A loopback port free for both UDP and TCP right now.
fn free_loopback_port() -> std::io::Result<u16> {
    let udp = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
    let port = udp.local_addr()?.port();
    std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port))?;
    Ok(port)
}

/// A started standby CoreDNS.
struct Standby {
    child: Child,
    corefile: PathBuf,
    /// Set by [`pass_on`] when the banner went by.
    banner: Arc<AtomicBool>,
    ready: bool,
    started: Instant,
}

/// Copies CoreDNS's output to the supervisor's, line by line, and sets `banner` at the banner.
async fn pass_on(stdout: ChildStdout, banner: Arc<AtomicBool>) {
    use std::io::Write as _;
    let mut lines = BufReader::new(stdout).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if line.starts_with(BANNER) {
            banner.store(true, Ordering::Release);
        }
        // A line at a time to the journal's pipe: short writes, not worth a blocking task.
        let _ = writeln!(std::io::stdout().lock(), "{line}");
    }
}

/// Who keeps the standby: the status line it sets once a standby is ready says so
/// (`systemctl show -p StatusText`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keeper {
    /// `localdns.service`'s supervisor, whose CoreDNS serves.
    Supervisor,
    /// `localdns-spare.service`, which watches the supervisor.
    Spare,
}

impl Keeper {
    /// The status line once standby CoreDNS `pid` is ready.
    pub fn ready_status(self, settings: &Settings, pid: u32) -> String {
        match self {
            Keeper::Supervisor => format!(
                "CoreDNS healthy on {} and {}; standby CoreDNS {pid} ready",
                settings.node_listener, settings.cluster_listener
            ),
            Keeper::Spare => format!("watching the supervisor; standby CoreDNS {pid} ready"),
        }
    }
}

/// The supervisor's (or the spare's) standby, if it has one, and when to start or ask it next.
pub struct StandbySlot {
    keeper: Keeper,
    dir: Option<PathBuf>,
    current: Option<Standby>,
    /// When to start a standby (none running).
    start_at: Option<Instant>,
    /// Starts that failed in a row (the backoff doubles with each).
    failures: u32,
    /// Numbers the standbys' Corefiles: a promoted CoreDNS keeps reading its own file.
    count: u64,
    /// The Corefile of the active CoreDNS when it was a standby (removed once it is replaced).
    active_corefile: Option<PathBuf>,
}

impl StandbySlot {
    /// No standby yet; one is started at the first [`StandbySlot::wake`] when
    /// `settings.standby_dir` is set.
    pub fn new(settings: &Settings, keeper: Keeper) -> StandbySlot {
        StandbySlot {
            keeper,
            dir: settings.standby_dir.clone(),
            current: None,
            start_at: settings.standby_dir.as_ref().map(|_| Instant::now()),
            failures: 0,
            count: 0,
            active_corefile: None,
        }
    }

    /// The pid of the standby when one is ready to take over.
    pub fn ready_pid(&self) -> Option<u32> {
        self.current
            .as_ref()
            .filter(|s| s.ready)
            .and_then(|s| s.child.id())
    }

    /// Starts no standby until [`StandbySlot::resume`] (the spare, while its CoreDNS serves, leaves
    /// the CPU to it and to the supervisor coming back).
    pub fn hold(&mut self) {
        self.start_at = None;
    }

    /// Starts a standby at the next [`StandbySlot::wake`] when none runs.
    pub fn resume(&mut self) {
        if self.dir.is_some() && self.current.is_none() {
            self.start_at = Some(Instant::now());
        }
    }

    /// When [`StandbySlot::wake`] has something to do: start a standby, or look at a starting one.
    pub fn next_wake(&self) -> Option<Instant> {
        match &self.current {
            None => self.start_at,
            Some(s) if !s.ready => Some(Instant::now() + POLL),
            Some(_) => None,
        }
    }

    /// Waits for the standby to exit (forever when there is none).
    pub async fn exited(&mut self) -> std::io::Result<ExitStatus> {
        match &mut self.current {
            Some(s) => s.child.wait().await,
            None => std::future::pending().await,
        }
    }

    /// The standby exited by itself: forget it and start another after the backoff, or after
    /// [`AFTER_SIGKILL`] at least when it was SIGKILLed (the OOM killer, most likely).
    pub fn on_exit(&mut self, status: ExitStatus) {
        if let Some(s) = self.current.take() {
            remove(&s.corefile);
        }
        if status.signal() == Some(Signal::SIGKILL as i32) {
            self.failed_at_least(
                &format!("the standby CoreDNS was SIGKILLed ({status}; at the slice's memory limit the OOM killer takes it first)"),
                AFTER_SIGKILL,
            );
        } else {
            self.failed(&format!("the standby CoreDNS exited ({status})"));
        }
    }

    fn failed(&mut self, why: &str) {
        self.failed_at_least(why, Duration::ZERO);
    }

    /// Counts a failed standby and sets when the next starts: the doubling backoff, `least` at
    /// least.
    fn failed_at_least(&mut self, why: &str, least: Duration) {
        self.failures += 1;
        let backoff = (Duration::from_secs(1) * 2u32.saturating_pow(self.failures - 1))
            .min(MAX_BACKOFF)
            .max(least);
        tracing::warn!(
            failures = self.failures,
            ?backoff,
            "{why}; another standby in {backoff:?}"
        );
        self.start_at = Some(Instant::now() + backoff);
    }

    /// Starts a standby when it is time, or looks whether a starting one printed its banner.
    pub async fn wake(&mut self, settings: &Settings, spawn: impl FnOnce(&Path) -> std::io::Result<Child>) {
        let Some(dir) = self.dir.clone() else { return };
        match &mut self.current {
            None => {
                if self.start_at.is_some_and(|at| at <= Instant::now()) {
                    self.start_at = None;
                    if let Err(why) = self.start(&dir, spawn) {
                        self.failed(&why);
                    }
                }
            }
            Some(s) if !s.ready => {
                if s.banner.load(Ordering::Acquire) {
                    s.ready = true;
                    self.failures = 0;
                    let pid = s.child.id().unwrap_or_default();
                    tracing::info!(pid, took = ?s.started.elapsed(), "standby CoreDNS ready");
                    notify::status(&self.keeper.ready_status(settings, pid));
                } else if s.started.elapsed() > settings.start_timeout {
                    let why = format!(
                        "the standby CoreDNS printed no {BANNER} banner within {:?}",
                        settings.start_timeout
                    );
                    self.stop().await;
                    self.failed(&why);
                }
            }
            Some(_) => {}
        }
    }

    fn start(
        &mut self,
        dir: &Path,
        spawn: impl FnOnce(&Path) -> std::io::Result<Child>,
    ) -> Result<(), String> {
        let port = free_loopback_port().map_err(|e| format!("no free loopback port for a standby: {e}"))?;
        let placeholder = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
        self.count += 1;
        let corefile = dir.join(format!("standby-{}.Corefile", self.count));
        node_base::files::write_atomic(&corefile, placeholder_corefile(placeholder).as_bytes(), 0o600)
            .map_err(|e| format!("cannot write {}: {e}", corefile.display()))?;
        let mut child = spawn(&corefile).map_err(|e| {
            remove(&corefile);
            format!("cannot start a standby CoreDNS: {e}")
        })?;
        if let Some(pid) = child.id()
            && let Err(err) = oom_score::set(pid, oom_score::STANDBY)
        {
            tracing::warn!(pid, %err, "cannot make the standby CoreDNS the OOM killer's first choice");
        }
        let banner = Arc::new(AtomicBool::new(false));
        if let Some(stdout) = child.stdout.take() {
            tokio::spawn(pass_on(stdout, banner.clone()));
        }
        tracing::info!(pid = child.id(), %placeholder, corefile = %corefile.display(), "starting a standby CoreDNS");
        self.current = Some(Standby {
            child,
            corefile,
            banner,
            ready: false,
            started: Instant::now(),
        });
        Ok(())
    }

    /// After the active CoreDNS exited: gives a ready standby the real Corefile and tells it to
    /// reload, and returns it (the caller waits for it to become healthy). `None` — no ready
    /// standby, or it could not be told — and the caller starts a CoreDNS as before; a standby that
    /// failed is stopped. Another standby is started at the next wake either way.
    pub async fn take_over(&mut self, settings: &Settings) -> Option<Child> {
        let mut s = self.current.take()?;
        self.start_at = Some(Instant::now());
        if let Some(old) = self.active_corefile.take() {
            remove(&old);
        }
        let told = async {
            if !s.ready {
                return Err("it was not ready yet".to_string());
            }
            if let Some(status) = s.child.try_wait().map_err(|e| e.to_string())? {
                return Err(format!("it had exited ({status})"));
            }
            let real = std::fs::read(&settings.corefile)
                .map_err(|e| format!("cannot read {}: {e}", settings.corefile.display()))?;
            node_base::files::write_atomic(&s.corefile, &real, 0o600)
                .map_err(|e| format!("cannot write {}: {e}", s.corefile.display()))?;
            let pid = s.child.id().ok_or("it has no pid")?;
            let pid = Pid::from_raw(i32::try_from(pid).map_err(|e| e.to_string())?);
            kill(pid, Signal::SIGUSR1).map_err(|e| format!("SIGUSR1: {e}"))
        };
        match told.await {
            Ok(()) => {
                if let Some(pid) = s.child.id()
                    && let Err(err) = oom_score::own().and_then(|own| oom_score::set(pid, own))
                {
                    tracing::warn!(pid, %err, "cannot set the new active CoreDNS's oom_score_adj back");
                }
                tracing::info!(
                    pid = s.child.id(),
                    "the standby CoreDNS takes over with the real Corefile"
                );
                self.active_corefile = Some(s.corefile);
                Some(s.child)
            }
            Err(why) => {
                tracing::warn!("the standby CoreDNS cannot take over: {why}; starting a new CoreDNS");
                let _ = s.child.kill().await;
                remove(&s.corefile);
                None
            }
        }
    }

    /// Stops the standby (SIGKILL: it serves nothing).
    pub async fn stop(&mut self) {
        if let Some(mut s) = self.current.take() {
            let _ = s.child.kill().await;
            remove(&s.corefile);
        }
    }
}

fn remove(path: &Path) {
    if let Err(err) = std::fs::remove_file(path)
        && err.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(%err, path = %path.display(), "cannot remove a standby Corefile");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_placeholder_serves_whoami_on_its_loopback_port_only() {
        let text = placeholder_corefile(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 40123));
        assert!(
            text.contains(".:40123 {\n    bind 127.0.0.1\n    whoami\n}\n"),
            "{text}"
        );
        assert!(!text.contains("forward") && !text.contains("cache"), "{text}");
    }

    fn slot() -> StandbySlot {
        StandbySlot {
            keeper: Keeper::Supervisor,
            dir: Some(PathBuf::from("/nonexistent/standby")),
            current: None,
            start_at: None,
            failures: 0,
            count: 0,
            active_corefile: None,
        }
    }

    /// Seconds from now until the slot starts its next standby.
    fn next_start_in(slot: &StandbySlot) -> Duration {
        slot.next_wake()
            .expect("a next start is set")
            .saturating_duration_since(Instant::now())
    }

    #[test]
    fn a_standby_that_exited_by_itself_is_started_again_after_the_doubling_backoff() {
        let mut slot = slot();
        slot.on_exit(ExitStatus::from_raw(1 << 8));
        assert!(next_start_in(&slot) <= Duration::from_secs(1));
        slot.on_exit(ExitStatus::from_raw(1 << 8));
        let second = next_start_in(&slot);
        assert!(
            second > Duration::from_secs(1) && second <= Duration::from_secs(2),
            "{second:?}"
        );
    }

    #[test]
    fn a_sigkilled_standby_is_started_again_only_after_a_minute() {
        let mut slot = slot();
        slot.on_exit(ExitStatus::from_raw(Signal::SIGKILL as i32));
        let next = next_start_in(&slot);
        assert!(
            next > AFTER_SIGKILL - Duration::from_secs(1) && next <= AFTER_SIGKILL,
            "{next:?}"
        );
        // Another signal is an exit like any other.
        let mut slot = self::slot();
        slot.on_exit(ExitStatus::from_raw(Signal::SIGTERM as i32));
        assert!(next_start_in(&slot) <= Duration::from_secs(1));
    }

    #[test]
    fn a_free_loopback_port_is_not_zero() {
        assert_ne!(free_loopback_port().unwrap(), 0);
    }
}
