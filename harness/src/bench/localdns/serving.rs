//! What serves the node listener in a round, started and stopped: ours (the supervisor with our
//! Corefile and environment) or bare CoreDNS ([`bare_corefile`]); and who holds the listener.

use std::time::{Duration, Instant};

use agent::exec;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::QUERY_NAME;
use crate::bench::error::BenchError;
use crate::bench::procfs::parent_pid;
use crate::localdns_live::{Lab, NODE, NotifySocket, Proc, query};

/// The Corefile a user would write by hand for the job the benchmark measures: the node listener,
/// forwarding to the same upstream, answers cached. `cache 30` is Kubernetes' default CoreDNS
/// Corefile's and caps the TTL as ours does, so both setups refresh the name from the upstream
/// equally often. Left out of what our Corefile has (none is needed for equivalence, as every
/// query is a cache hit): the health zone (`whoami` on both listeners, for the supervisor's
/// checks), the cluster listener's block (no query goes there), `errors` (logs failures only),
/// `ready`, `loop`, `prometheus` (per-query metrics: a real cost of ours, part of what the bare
/// comparison measures), forward's `force_tcp`/`policy`/`max_concurrent` and cache's
/// `success`/`denial`/`serve_stale`/`servfail` settings (they act on misses and upstream failures).
pub fn bare_corefile() -> String {
    format!(
        "# The hand-written equivalent (harness/src/bench/localdns/serving.rs, `bare_corefile`).\n\
         .:53 {{\n    bind {NODE}\n    forward . {}\n    cache 30\n}}\n",
        crate::localdns_live::UPSTREAM
    )
}

/// What serves the node listener now.
pub enum Serving {
    /// The supervisor (its CoreDNS is its child).
    Ours(Proc),
    /// CoreDNS started directly.
    Bare(Proc),
}

impl Serving {
    /// The one CoreDNS holding the node listener, checked to be the one this serving started.
    pub fn coredns_pid(&self, lab: &Lab) -> Result<u32, BenchError> {
        let pids = listener_pids(lab)?;
        let [pid] = pids[..] else {
            return Err(BenchError::Listener(format!(
                "expected one process on {NODE}:53, found {pids:?}"
            )));
        };
        match self {
            Serving::Ours(supervisor) => {
                let ppid = parent_pid(pid)?;
                if ppid != supervisor.pid() {
                    return Err(BenchError::Listener(format!(
                        "{NODE}:53 is held by pid {pid}, a child of {ppid}, not of the supervisor ({})",
                        supervisor.pid()
                    )));
                }
            }
            Serving::Bare(bare) => {
                if pid != bare.pid() {
                    return Err(BenchError::Listener(format!(
                        "{NODE}:53 is held by pid {pid}, not by the CoreDNS we started ({})",
                        bare.pid()
                    )));
                }
            }
        }
        Ok(pid)
    }
}

/// The processes holding a UDP socket on the node listener (`ss -ulnp`, node namespace).
pub fn listener_pids(lab: &Lab) -> Result<Vec<u32>, BenchError> {
    let out = exec::run_stdout(
        lab.node
            .cmd("ss")
            .args(["-H", "-u", "-l", "-n", "-p", "src"])
            .arg(format!("{NODE}:53")),
    )?;
    let mut pids: Vec<u32> = out
        .split("pid=")
        .skip(1)
        .map(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().map_err(|_| BenchError::Unexpected {
                source_of: "`ss -ulnp`".into(),
                why: format!("no pid after `pid=` in {out:?}"),
            })
        })
        .collect::<Result<_, _>>()?;
    pids.sort_unstable();
    pids.dedup();
    Ok(pids)
}

/// Waits until nothing holds the node listener (after a stop), at most 30 s.
fn until_listener_free(lab: &Lab) -> Result<(), BenchError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let pids = listener_pids(lab)?;
        if pids.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(BenchError::Listener(format!(
                "{NODE}:53 still held by {pids:?} 30 s after the stop"
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the node listener answers the benchmark's name (which warms the cache), at most 60 s.
fn until_answering(lab: &Lab, what: &'static str) -> Result<(), BenchError> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let why = match query(NODE, QUERY_NAME, false) {
            Ok(answer) if !answer.a.is_empty() => return Ok(()),
            Ok(answer) => format!("answer without an A record: {answer:?}"),
            Err(e) => e.to_string(),
        };
        if Instant::now() > deadline {
            return Err(BenchError::NoAnswer {
                what,
                name: QUERY_NAME,
                listener: format!("{NODE}:53"),
                why,
                logs: format!("{}\n{}", lab.logs(), bare_log(lab)),
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn bare_log(lab: &Lab) -> String {
    let path = lab.dir.path().join("bare.log");
    format!(
        "--- bare.log ---\n{}",
        std::fs::read_to_string(path).unwrap_or_default()
    )
}

/// Starts the supervisor (our Corefile and environment) and waits for READY=1 and an answer.
pub fn start_ours(lab: &Lab, notify: &NotifySocket) -> Result<Serving, BenchError> {
    // Messages of an earlier supervisor (its READY=1 among them) must not count for this one.
    notify.drain();
    let supervisor = lab.start_supervisor(&lab.supervisor_env(&[])?, Some(&notify.path))?;
    notify
        .until("READY=1", Duration::from_secs(60))
        .map_err(|seen| BenchError::NotReady {
            seen,
            logs: lab.logs(),
        })?;
    until_answering(lab, "the supervisor's CoreDNS")?;
    Ok(Serving::Ours(supervisor))
}

/// SIGTERM to the supervisor (it stops CoreDNS with SIGINT), then waits until both are gone.
pub fn stop_ours(lab: &Lab, supervisor: Proc) -> Result<(), BenchError> {
    terminate(lab, supervisor)?;
    until_listener_free(lab)
}

/// SIGTERM to the supervisor, then waits at most 30 s for it to exit.
pub fn terminate(lab: &Lab, mut supervisor: Proc) -> Result<(), BenchError> {
    let pid = supervisor.pid();
    // A pid fits an i32 (`pid_max` is at most 2^22).
    kill(Pid::from_raw(pid as i32), Signal::SIGTERM).map_err(|source| BenchError::Signal {
        signal: Signal::SIGTERM,
        what: "the supervisor",
        pid,
        source,
    })?;
    match supervisor.wait_exit(Duration::from_secs(30))? {
        Some(_) => Ok(()),
        None => Err(BenchError::NotExited { logs: lab.logs() }),
    }
}

/// Starts the CoreDNS binary directly in the node namespace with [`bare_corefile`].
pub fn start_bare(lab: &Lab) -> Result<Serving, BenchError> {
    let corefile = lab.write("bare.Corefile", &bare_corefile())?;
    let mut cmd = lab.node.cmd(&lab.coredns);
    cmd.arg("-conf").arg(&corefile);
    // A Proc is killed on drop, like the lab's own processes.
    let bare = Proc::spawn_logged(cmd, lab.dir.path().join("bare.log"))?;
    until_answering(lab, "the bare CoreDNS")?;
    Ok(Serving::Bare(bare))
}

pub fn stop_bare(lab: &Lab, mut bare: Proc) -> Result<(), BenchError> {
    bare.stop();
    until_listener_free(lab)
}
