//! `cargo run -p harness --example localdns_bench [-- SECONDS THREADS]`: cached-query throughput and
//! latency through the node listener of a live LocalDNS (network namespaces on this host) in three
//! setups, taken in turn twice: the real CoreDNS under the supervisor with our NOTRACK table, the
//! same without the table, and the same CoreDNS binary with no agent at all (started directly with a
//! hand-written Corefile, no table of ours). During each round it samples conntrack's entry count
//! and the serving CoreDNS process's peak RSS and CPU, printed against the agent's default LocalDNS
//! limits, then the throughput ratios (ours with rules / without, with rules / bare). Needs root,
//! nft, conntrack, ss, the CoreDNS artifact (`harness images build`) and the supervisor built into
//! the same target directory and profile (`cargo build -p agent --bins`). Results: `docs/perf.md`.

#[path = "../tests/localdns_live_support/mod.rs"]
mod support;

use std::net::{Ipv4Addr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agent::exec;
use agent::validate::{DEFAULT_CPU_LIMIT_MILLICORES, DEFAULT_MEMORY_LIMIT_MB};
use anyhow::{Context, Result, anyhow, bail, ensure};
use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RecordType};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use support::*;

/// How often conntrack and the serving CoreDNS are sampled during a round.
const SAMPLE_EVERY: Duration = Duration::from_millis(200);
/// The cached name every client asks for (A record, TTL 300 in the upstream zone).
const QUERY_NAME: &str = "www.example.test.";

/// What serves the node listener in a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Setup {
    /// The supervisor's CoreDNS with our rendered Corefile, our `ip unbounded_localdns` table loaded.
    OursWithRules,
    /// The same, our table deleted.
    OursWithoutRules,
    /// The same CoreDNS binary started directly with [`bare_corefile`]; no supervisor, no table of ours.
    Bare,
}

impl Setup {
    const ALL: [Setup; 3] = [Setup::OursWithRules, Setup::OursWithoutRules, Setup::Bare];

    fn label(self) -> &'static str {
        match self {
            Setup::OursWithRules => "ours, NOTRACK rules",
            Setup::OursWithoutRules => "ours, no rules",
            Setup::Bare => "bare CoreDNS",
        }
    }
}

/// The Corefile a user would write by hand for the job the benchmark measures: the node listener,
/// forwarding to the same upstream, answers cached. `cache 30` is Kubernetes' default CoreDNS
/// Corefile's and caps the TTL as ours does, so both setups refresh the name from the upstream
/// equally often. Left out of what our Corefile has (none is needed for equivalence, as every
/// query is a cache hit): the health zone (`whoami` on both listeners, for the supervisor's
/// checks), the cluster listener's block (no query goes there), `errors` (logs failures only),
/// `ready`, `loop`, `prometheus` (per-query metrics: a real cost of ours, part of what the bare
/// comparison measures), forward's `force_tcp`/`policy`/`max_concurrent` and cache's
/// `success`/`denial`/`serve_stale`/`servfail` settings (they act on misses and upstream failures).
fn bare_corefile() -> String {
    format!(
        "# The hand-written equivalent (harness/examples/localdns_bench.rs, `bare_corefile`).\n\
         .:53 {{\n    bind {NODE}\n    forward . {UPSTREAM}\n    cache 30\n}}\n"
    )
}

/// One round's figures.
struct Run {
    queries: u64,
    seconds: f64,
    p50_us: u64,
    p99_us: u64,
    max_conntrack: u64,
    /// Peak VmRSS of the serving CoreDNS, KiB.
    peak_rss_kib: u64,
    /// utime+stime of the serving CoreDNS over the round, clock ticks.
    cpu_ticks: u64,
}

impl Run {
    fn qps(&self) -> f64 {
        self.queries as f64 / self.seconds
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// VmRSS of `pid`, KiB.
fn rss_kib(pid: i32) -> Result<u64> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    text.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| anyhow!("no VmRSS line in {path}"))
}

/// The fields of `/proc/<pid>/stat` after the command name (the first is the state, field 3).
fn stat_fields(pid: i32) -> Result<Vec<String>> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let (_, rest) = text
        .rsplit_once(')')
        .ok_or_else(|| anyhow!("{path}: no `)` after the command name: {text:?}"))?;
    Ok(rest.split_whitespace().map(str::to_owned).collect())
}

/// utime+stime of `pid`, clock ticks.
fn cpu_ticks(pid: i32) -> Result<u64> {
    let fields = stat_fields(pid)?;
    // utime and stime are fields 14 and 15 of proc(5); index 0 here is field 3.
    let field = |i: usize| -> Result<u64> {
        fields
            .get(i)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| anyhow!("/proc/{pid}/stat: field {} is not a number", i + 3))
    };
    Ok(field(11)? + field(12)?)
}

/// The parent of `pid` (field 4 of `/proc/<pid>/stat`).
fn parent_pid(pid: i32) -> Result<i32> {
    stat_fields(pid)?
        .get(1)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow!("/proc/{pid}/stat: no parent pid"))
}

/// The processes holding a UDP socket on the node listener (`ss -ulnp`, node namespace).
fn listener_pids(lab: &Lab) -> Result<Vec<i32>> {
    let out = exec::run_stdout(
        lab.node
            .cmd("ss")
            .args(["-H", "-u", "-l", "-n", "-p", "src"])
            .arg(format!("{NODE}:53")),
    )?;
    let mut pids: Vec<i32> = out
        .split("pid=")
        .skip(1)
        .map(|rest| {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits
                .parse()
                .with_context(|| format!("a pid in `ss` output: {out:?}"))
        })
        .collect::<Result<_>>()?;
    pids.sort_unstable();
    pids.dedup();
    Ok(pids)
}

/// The one process holding the node listener; `parent` is the supervisor's pid (the CoreDNS we
/// want is its child), or `None` for a CoreDNS we started directly (`direct` is then its pid).
fn serving_pid(lab: &Lab, parent: Option<i32>, direct: Option<i32>) -> Result<i32> {
    let pids = listener_pids(lab)?;
    let [pid] = pids[..] else {
        bail!("expected one process on {NODE}:53, found {pids:?}");
    };
    if let Some(parent) = parent {
        let ppid = parent_pid(pid)?;
        ensure!(
            ppid == parent,
            "{NODE}:53 is held by pid {pid}, a child of {ppid}, not of the supervisor ({parent})"
        );
    }
    if let Some(direct) = direct {
        ensure!(
            pid == direct,
            "{NODE}:53 is held by pid {pid}, not by the CoreDNS we started ({direct})"
        );
    }
    Ok(pid)
}

fn pid_of(proc: &Proc) -> Result<i32> {
    i32::try_from(proc.child.id()).context("pid out of range")
}

/// Waits until nothing holds the node listener (after a stop), at most 30 s.
fn until_listener_free(lab: &Lab) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let pids = listener_pids(lab)?;
        if pids.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{NODE}:53 still held by {pids:?} 30 s after the stop");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until the node listener answers the benchmark's name (which warms the cache), at most 60 s.
fn until_answering(lab: &Lab, what: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let err = match query(NODE, QUERY_NAME, false) {
            Ok(answer) if !answer.a.is_empty() => return Ok(()),
            Ok(answer) => format!("answer without an A record: {answer:?}"),
            Err(e) => e,
        };
        if Instant::now() > deadline {
            bail!(
                "{what} did not answer {QUERY_NAME} on {NODE}:53 within 60 s: {err}\n{}\n{}",
                lab.logs(),
                bare_log(lab)
            );
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
fn start_ours(lab: &Lab, notify: &NotifySocket) -> Result<Proc> {
    // Messages of an earlier supervisor (its READY=1 among them) must not count for this one.
    while notify.recv(Duration::from_millis(1)).is_some() {}
    let supervisor = lab.start_supervisor(&lab.supervisor_env(&[]), Some(&notify.path));
    notify.until("READY=1", Duration::from_secs(60)).map_err(|seen| {
        anyhow!(
            "the supervisor sent no READY=1 within 60 s (it sent {seen:?})\n{}",
            lab.logs()
        )
    })?;
    until_answering(lab, "the supervisor's CoreDNS")?;
    Ok(supervisor)
}

/// SIGTERM to the supervisor (it stops CoreDNS with SIGINT), then waits for both to be gone.
fn stop_ours(lab: &Lab, mut supervisor: Proc) -> Result<()> {
    kill(Pid::from_raw(pid_of(&supervisor)?), Signal::SIGTERM).context("SIGTERM to the supervisor")?;
    supervisor.wait_exit(Duration::from_secs(30)).ok_or_else(|| {
        anyhow!(
            "the supervisor did not exit within 30 s of SIGTERM\n{}",
            lab.logs()
        )
    })?;
    until_listener_free(lab)
}

/// Starts the CoreDNS binary directly in the node namespace with [`bare_corefile`].
fn start_bare(lab: &Lab) -> Result<Proc> {
    let corefile = lab.write("bare.Corefile", &bare_corefile());
    let log = lab.dir.path().join("bare.log");
    let out = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    let mut cmd = lab.node.cmd(&lab.coredns);
    cmd.arg("-conf")
        .arg(&corefile)
        .stdin(std::process::Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {}", exec::CommandLine(&cmd)))?;
    // A Proc is killed on drop, like the support module's own processes.
    let bare = Proc { child, log };
    until_answering(lab, "the bare CoreDNS")?;
    Ok(bare)
}

fn stop_bare(lab: &Lab, mut bare: Proc) -> Result<()> {
    bare.stop();
    until_listener_free(lab)
}

/// What the sampler thread saw.
struct Samples {
    max_conntrack: u64,
    peak_rss_kib: u64,
}

/// Every [`SAMPLE_EVERY`] until `stop`: conntrack's entry count in the node namespace and the
/// VmRSS of `pid`.
fn sample(node: &Netns, pid: i32, stop: &AtomicBool) -> Result<Samples> {
    let mut samples = Samples {
        max_conntrack: 0,
        peak_rss_kib: rss_kib(pid)?,
    };
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        samples.peak_rss_kib = samples.peak_rss_kib.max(rss_kib(pid)?);
        let out = exec::run_stdout(node.cmd("conntrack").arg("-C"))?;
        let count: u64 = out
            .trim()
            .parse()
            .with_context(|| format!("`conntrack -C` printed {out:?}"))?;
        samples.max_conntrack = samples.max_conntrack.max(count);
        next += SAMPLE_EVERY;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    Ok(samples)
}

/// One client: a query in flight at a time until `stop`; the latencies of the answered ones.
fn client(node: &Netns, stop: &AtomicBool) -> Result<Vec<u64>> {
    node.enter();
    let mut msg = Message::query();
    msg.metadata.recursion_desired = true;
    msg.add_query(Query::query(Name::from_ascii(QUERY_NAME)?, RecordType::A));
    let mut latencies = Vec::new();
    let mut buf = [0u8; 1500];
    while !stop.load(Ordering::Relaxed) {
        // A new socket (source port) per query, as stub resolvers do: one flow per query.
        let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).context("binding a client socket")?;
        socket.set_read_timeout(Some(Duration::from_secs(1)))?;
        msg.metadata.id = msg.metadata.id.wrapping_add(1);
        let bytes = msg.to_vec()?;
        let t = Instant::now();
        socket
            .send_to(&bytes, (NODE, 53))
            .with_context(|| format!("sending a query to {NODE}:53"))?;
        if socket.recv(&mut buf).is_ok() {
            latencies.push(t.elapsed().as_micros() as u64);
        }
    }
    Ok(latencies)
}

/// Closed-loop load: `threads` clients, each one query in flight, for `duration`, while the
/// serving CoreDNS `pid` and conntrack are sampled.
fn load(lab: &Lab, pid: i32, duration: Duration, threads: usize) -> Result<Run> {
    let stop = AtomicBool::new(false);
    let node = &lab.node;
    std::thread::scope(|s| {
        let cpu_before = cpu_ticks(pid)?;
        let started = Instant::now();
        let sampler = s.spawn(|| sample(node, pid, &stop));
        let workers: Vec<_> = (0..threads).map(|_| s.spawn(|| client(node, &stop))).collect();
        std::thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
        let mut all = Vec::new();
        for worker in workers {
            all.extend(worker.join().map_err(|_| anyhow!("a client thread panicked"))??);
        }
        let cpu_after = cpu_ticks(pid).context("the serving CoreDNS after the round")?;
        let seconds = started.elapsed().as_secs_f64();
        let samples = sampler
            .join()
            .map_err(|_| anyhow!("the sampler thread panicked"))??;
        all.sort_unstable();
        let pct = |p: f64| {
            all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
                .copied()
                .unwrap_or(0)
        };
        Ok(Run {
            queries: all.len() as u64,
            seconds,
            p50_us: pct(0.50),
            p99_us: pct(0.99),
            max_conntrack: samples.max_conntrack,
            peak_rss_kib: samples.peak_rss_kib,
            cpu_ticks: cpu_after.saturating_sub(cpu_before),
        })
    })
}

/// What serves the node listener now.
enum Serving {
    Ours(Proc),
    Bare(Proc),
}

fn nft(lab: &Lab, args: &[&str]) -> Result<()> {
    exec::run(lab.node.cmd("nft").args(args))?;
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let seconds: u64 = parse_arg(&args, 1, "SECONDS", 10)?;
    let threads: usize = parse_arg(&args, 2, "THREADS", 4)?;
    let clk_tck = clock_ticks()?;
    let bench = BenchLab::build()?;
    let lab = &bench.lab;
    // Conntrack active, as on any node with a stateful firewall.
    nft(lab, &["add table inet bench_stateful"])?;
    nft(
        lab,
        &["add chain inet bench_stateful input { type filter hook input priority 0; policy accept; }"],
    )?;
    nft(
        lab,
        &["add rule inet bench_stateful input ct state established,related accept"],
    )?;
    let notify = NotifySocket::bind(lab.dir.path());
    // Lab::build loaded our table; the supervisor serves first.
    let script = lab.dir.path().join("localdns.nft");
    let script = script.to_str().context("a UTF-8 path")?;
    let mut serving = Serving::Ours(start_ours(lab, &notify)?);

    let cpu_limit = f64::from(DEFAULT_CPU_LIMIT_MILLICORES);
    let memory_limit_mib = f64::from(DEFAULT_MEMORY_LIMIT_MB);
    println!(
        "{threads} clients, {seconds} s per round; CoreDNS's RSS and CPU (millicores, m) in % of the agent's default \
         LocalDNS limits (localdns.slice, not applied here): MemoryMax {DEFAULT_MEMORY_LIMIT_MB} MiB, \
         CPUQuota {DEFAULT_CPU_LIMIT_MILLICORES} m"
    );
    // Alternating rounds, so that drift of a shared machine hits every setup alike.
    let mut runs: Vec<(Setup, Run)> = Vec::new();
    for _ in 0..2 {
        for setup in Setup::ALL {
            serving = match (setup, serving) {
                (Setup::OursWithRules, Serving::Ours(p)) => {
                    nft(lab, &["-f", script])?;
                    Serving::Ours(p)
                }
                (Setup::OursWithRules, Serving::Bare(p)) => {
                    stop_bare(lab, p)?;
                    nft(lab, &["-f", script])?;
                    Serving::Ours(start_ours(lab, &notify)?)
                }
                (Setup::OursWithoutRules, Serving::Ours(p)) => {
                    nft(lab, &["delete table ip unbounded_localdns"])?;
                    Serving::Ours(p)
                }
                (Setup::Bare, Serving::Ours(p)) => {
                    stop_ours(lab, p)?;
                    Serving::Bare(start_bare(lab)?)
                }
                (setup, _) => bail!("no way from the current setup to {setup:?}"),
            };
            let pid = match &serving {
                Serving::Ours(p) => serving_pid(lab, Some(pid_of(p)?), None)?,
                Serving::Bare(p) => serving_pid(lab, None, Some(pid_of(p)?))?,
            };
            exec::run(lab.node.cmd("conntrack").arg("-F"))?;
            let run = load(lab, pid, Duration::from_secs(seconds), threads)
                .with_context(|| format!("round {:?}", setup.label()))?;
            ensure!(
                listener_pids(lab)? == [pid],
                "{NODE}:53 changed hands during the round (CoreDNS {pid} restarted?)\n{}",
                lab.logs()
            );
            let cpu = millicores(run.cpu_ticks, clk_tck, run.seconds);
            println!(
                "{:<19} {:>6.0} q/s  p50 {:>4} µs  p99 {:>5} µs  conntrack max {:>5}  \
                 RSS max {:>5.1} MiB ({:>2.0}%)  CPU {:>4.0} m ({:>2.0}%)  ({} queries in {:.1} s)",
                setup.label(),
                run.qps(),
                run.p50_us,
                run.p99_us,
                run.max_conntrack,
                mib(run.peak_rss_kib),
                mib(run.peak_rss_kib) / memory_limit_mib * 100.0,
                cpu,
                cpu / cpu_limit * 100.0,
                run.queries,
                run.seconds
            );
            runs.push((setup, run));
        }
    }
    // The last round's CoreDNS is killed on drop (Proc), before the namespaces go.
    drop(serving);

    let of = |setup: Setup| runs.iter().filter(move |(s, _)| *s == setup).map(|(_, r)| r);
    let qps = |setup: Setup| {
        of(setup).map(|r| r.queries as f64).sum::<f64>() / of(setup).map(|r| r.seconds).sum::<f64>()
    };
    for setup in Setup::ALL {
        let ticks = of(setup).map(|r| r.cpu_ticks).sum::<u64>();
        let seconds = of(setup).map(|r| r.seconds).sum::<f64>();
        println!(
            "{:<19} {:>6.0} q/s over both rounds  RSS max {:>5.1} MiB  CPU {:>4.0} m",
            setup.label(),
            qps(setup),
            mib(of(setup).map(|r| r.peak_rss_kib).max().unwrap_or(0)),
            millicores(ticks, clk_tck, seconds)
        );
    }
    let with = qps(Setup::OursWithRules);
    println!(
        "throughput ratio (ours with rules / ours without): {:.3}",
        with / qps(Setup::OursWithoutRules)
    );
    println!(
        "throughput ratio (ours with rules / bare CoreDNS): {:.3}",
        with / qps(Setup::Bare)
    );
    println!(
        "throughput ratio (ours without rules / bare CoreDNS): {:.3}",
        qps(Setup::OursWithoutRules) / qps(Setup::Bare)
    );
    Ok(())
}
