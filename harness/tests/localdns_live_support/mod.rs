//! A live LocalDNS in network namespaces of a lab VM (Debian's kernel, which has dummy links): the
//! node namespace gets the `localdns` dummy link with both listener /32s and our nft table, both
//! made by the agent's own `agent::hostnet::apply`; a peer namespace serves the test zone
//! `example.test` (the node's upstream) and another plays cluster DNS for `cluster.local`, both
//! with the real CoreDNS and its `file` plugin. The supervisor runs the real CoreDNS with the
//! Corefile and environment file the agent renders. Used by `guest_localdns_*.rs`, which run in
//! the VM (see `harness/tests/lab_guest_tests.rs`).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use agent::exec;
use agent::goal::{self, HostFacts};
use agent::hostnet::link::Netlink;
use agent::hostnet::{LINK_NAME, NetworkSpec};
use agent::names::Slot;
use agent::render;
use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};

pub const NODE: Ipv4Addr = Ipv4Addr::new(169, 254, 10, 10);
pub const CLUSTER: Ipv4Addr = Ipv4Addr::new(169, 254, 10, 11);
/// Node side and upstream side of the node–upstream link; node side and cluster DNS side of the other.
pub const NODE_TO_UPSTREAM: Ipv4Addr = Ipv4Addr::new(10, 55, 0, 1);
pub const UPSTREAM: Ipv4Addr = Ipv4Addr::new(10, 55, 0, 2);
pub const NODE_TO_CLUSTER: Ipv4Addr = Ipv4Addr::new(10, 55, 0, 5);
pub const CLUSTER_DNS: Ipv4Addr = Ipv4Addr::new(10, 55, 0, 6);
pub const METRICS: &str = "10.55.0.1:9253";
pub const UPSTREAM_METRICS: &str = "10.55.0.2:9153";

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A short id unique in this process and among concurrent processes, for netns and link names.
fn unique_id() -> String {
    format!(
        "{}{}",
        std::process::id() % 100_000,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn run(cmd: &mut Command) -> String {
    exec::run_stdout(cmd).unwrap_or_else(|e| panic!("{e}"))
}

/// The environment variable naming the real CoreDNS in the guest (set by the host-side runner,
/// which copies the binary from the lab cache into the VM).
pub const COREDNS_ENV: &str = "LOCALDNS_TEST_COREDNS";

const RUN_IN_A_VM: &str = "these guest tests run inside a lab VM: \
    `cargo nextest run -p harness --test lab_guest_tests` (after `harness images build`)";

/// The real CoreDNS the runner copied into the VM (`$LOCALDNS_TEST_COREDNS`).
pub fn coredns() -> PathBuf {
    let path = std::env::var_os(COREDNS_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("{COREDNS_ENV} is not set: {RUN_IN_A_VM}"));
    assert!(
        path.is_file(),
        "{COREDNS_ENV}={} is missing: {RUN_IN_A_VM}",
        path.display()
    );
    path
}

/// `unbounded-localdns-supervisor`: the test archive's copy beside the test's `deps/` directory
/// (the archive holds the workspace's binaries), else the one cargo built.
pub fn supervisor_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let path = exe
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .join("unbounded-localdns-supervisor");
    assert!(
        path.is_file(),
        "{} is missing: build it with `cargo build -p agent --bins`; {RUN_IN_A_VM}",
        path.display()
    );
    path
}

/// A named network namespace, deleted (with every process in it killed) on drop.
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(role: &str, id: &str) -> Netns {
        let name = format!("h6{role}{id}");
        run(Command::new("ip").args(["netns", "add", &name]));
        let ns = Netns { name };
        ns.run(&["ip", "link", "set", "lo", "up"]);
        ns
    }

    pub fn cmd(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).arg(program);
        cmd
    }

    pub fn run(&self, argv: &[&str]) -> String {
        run(self.cmd(argv[0]).args(&argv[1..]))
    }

    /// Moves the calling thread (and what it starts) into this namespace.
    pub fn enter(&self) {
        let file = File::open(format!("/run/netns/{}", self.name)).expect("open netns");
        nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns (needs root)");
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Ok(pids) = exec::run_stdout(Command::new("ip").args(["netns", "pids", &self.name])) {
            for pid in pids.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL);
            }
        }
        let _ = exec::run_unchecked(Command::new("ip").args(["netns", "del", &self.name]));
    }
}

/// A process killed on drop.
pub struct Proc {
    pub child: Child,
    pub log: PathBuf,
}

impl Proc {
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the process to exit, at most `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

fn spawn_logged(mut cmd: Command, log: PathBuf) -> Proc {
    let out = File::create(&log).expect("log file");
    let err = out.try_clone().unwrap();
    let child = cmd
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("spawn");
    Proc { child, log }
}

/// Everything of one live LocalDNS.
pub struct Lab {
    pub dir: tempfile::TempDir,
    pub coredns: PathBuf,
    pub upstream_server: Option<Proc>,
    pub cluster_server: Option<Proc>,
    // Declared last: dropped after the processes above.
    pub peer_upstream: Netns,
    pub peer_cluster: Netns,
    pub node: Netns,
}

const EXAMPLE_ZONE: &str = "$ORIGIN example.test.
@      300 IN SOA ns.example.test. admin.example.test. 1 60 60 3600 1
@      300 IN NS  ns.example.test.
ns     300 IN A   10.55.0.2
www    300 IN A   192.0.2.80
short    1 IN A   192.0.2.81
";

const CLUSTER_ZONE: &str = "$ORIGIN cluster.local.
@      30 IN SOA ns.cluster.local. admin.cluster.local. 1 60 60 3600 5
@      30 IN NS  ns.cluster.local.
ns     30 IN A   10.55.0.6
kubernetes.default.svc 5 IN A 10.96.0.1
";

fn veth(a: &Netns, a_ip: Ipv4Addr, b: &Netns, b_ip: Ipv4Addr, id: &str, tag: &str) {
    let (an, bn) = (format!("v{id}{tag}a"), format!("v{id}{tag}b"));
    run(Command::new("ip").args([
        "link", "add", &an, "netns", &a.name, "type", "veth", "peer", "name", &bn, "netns", &b.name,
    ]));
    a.run(&["ip", "addr", "add", &format!("{a_ip}/30"), "dev", &an]);
    b.run(&["ip", "addr", "add", &format!("{b_ip}/30"), "dev", &bn]);
    a.run(&["ip", "link", "set", &an, "up"]);
    b.run(&["ip", "link", "set", &bn, "up"]);
}

/// The agent config of the node: LocalDNS on, cluster DNS served from the peer namespace.
pub fn config_text(notrack_replies: bool) -> String {
    let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
    let ca = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, pem);
    serde_json::json!({
        "NodeName": "node1",
        "Cluster": {"CaCertBase64": ca, "ClusterDNS": CLUSTER_DNS.to_string()},
        "Kubelet": {"ApiServer": "https://192.168.100.1:6443", "Auth": {"BootstrapToken": "abcdef.0123456789abcdef"}},
        "LocalDNS": {"Enabled": true, "NOTRACKReplies": notrack_replies, "MetricsAddress": METRICS}
    })
    .to_string()
}

/// Where the listener addresses live in the node namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listeners {
    /// On the `localdns` dummy link, with our table, both made by `agent::hostnet::apply`, as on a
    /// node: the guest tests (Debian's kernel in a lab VM).
    DummyLink,
    /// On `lo`, with our table from the same rendered script (`nft -f`): only for the benchmark
    /// (`harness/examples/localdns_bench.rs`) on a host whose kernel has no dummy links.
    Loopback,
}

/// The validated agent config of the node.
pub fn config(notrack_replies: bool) -> agent::validate::Config {
    agent::validate::parse(&config_text(notrack_replies)).unwrap_or_else(|p| panic!("{p}"))
}

impl Lab {
    /// Namespaces, links, the node's nft table and both peer DNS servers (not yet LocalDNS itself).
    pub fn new(notrack_replies: bool) -> Lab {
        Lab::build(notrack_replies, Listeners::DummyLink, coredns())
    }

    /// [`Lab::new`] with the listeners' place and the CoreDNS binary chosen by the caller.
    pub fn build(notrack_replies: bool, listeners: Listeners, coredns: PathBuf) -> Lab {
        let id = unique_id();
        let node = Netns::new("n", &id);
        let peer_upstream = Netns::new("u", &id);
        let peer_cluster = Netns::new("c", &id);
        veth(&node, NODE_TO_UPSTREAM, &peer_upstream, UPSTREAM, &id, "u");
        veth(&node, NODE_TO_CLUSTER, &peer_cluster, CLUSTER_DNS, &id, "c");
        let config = config(notrack_replies);
        let local_dns = config.local_dns.as_ref().expect("LocalDNS is enabled");
        let script = agent::hostnet::nft_script(&config, local_dns);
        let dir = tempfile::tempdir().unwrap();
        node.enter();
        match listeners {
            Listeners::DummyLink => {
                // The agent's own apply, in the node namespace: the `localdns` dummy link holding
                // both listener /32s and the `ip unbounded_localdns` table from the rendered script.
                let spec = NetworkSpec::from_config(local_dns);
                agent::hostnet::apply(&spec, &script).unwrap_or_else(|e| {
                    panic!(
                        "agent::hostnet::apply in namespace {}: {e}; {RUN_IN_A_VM}",
                        node.name
                    )
                });
                let link = Netlink::open()
                    .expect("netlink")
                    .observe(LINK_NAME)
                    .expect("observe the localdns link")
                    .expect("apply created the localdns link");
                assert_eq!(link.kind.as_deref(), Some("dummy"), "{link:?}");
                assert_eq!(link.ipv4.len(), 2, "{link:?}");
            }
            Listeners::Loopback => {
                for ip in [NODE, CLUSTER] {
                    node.run(&["ip", "addr", "add", &format!("{ip}/32"), "dev", "lo"]);
                }
                let path = dir.path().join("localdns.nft");
                std::fs::write(&path, &script).unwrap();
                node.run(&["nft", "-f", path.to_str().unwrap()]);
            }
        }
        let mut lab = Lab {
            dir,
            coredns,
            upstream_server: None,
            cluster_server: None,
            peer_upstream,
            peer_cluster,
            node,
        };
        lab.write("localdns.nft", &script);
        lab.upstream_server = Some(lab.start_upstream());
        let cluster_corefile = lab.write(
            "cluster.Corefile",
            &format!(
                "cluster.local:53 {{\n  bind {CLUSTER_DNS}\n  file {}\n}}\n",
                lab.write("cluster.local.zone", CLUSTER_ZONE).display()
            ),
        );
        let mut cmd = lab.peer_cluster.cmd(&lab.coredns);
        cmd.arg("-conf").arg(&cluster_corefile);
        lab.cluster_server = Some(spawn_logged(cmd, lab.dir.path().join("cluster.log")));
        lab.wait_until(
            "the upstream and cluster DNS servers answer",
            Duration::from_secs(60),
            |lab| {
                lab.node.enter();
                query(UPSTREAM, "www.example.test", false).is_ok()
                    && query(CLUSTER_DNS, "kubernetes.default.svc.cluster.local", false).is_ok()
            },
        );
        lab
    }

    pub fn start_upstream(&self) -> Proc {
        let zone = self.write("example.test.zone", EXAMPLE_ZONE);
        let corefile = self.write(
            "upstream.Corefile",
            &format!(
                "example.test:53 {{\n  bind {UPSTREAM}\n  file {}\n  prometheus {UPSTREAM_METRICS}\n}}\n",
                zone.display()
            ),
        );
        let mut cmd = self.peer_upstream.cmd(&self.coredns);
        cmd.arg("-conf").arg(&corefile);
        spawn_logged(cmd, self.dir.path().join("upstream.log"))
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn goal(&self, notrack_replies: bool) -> agent::goal::LocalDnsGoal {
        let config = config(notrack_replies);
        let facts = HostFacts {
            host_resolv_conf: format!("nameserver {UPSTREAM}\n"),
            ..Default::default()
        };
        goal::resolve(&config, &facts, Slot::Kube1)
            .unwrap_or_else(|e| panic!("{e}"))
            .local_dns
            .expect("enabled")
    }

    /// The environment the supervisor gets: the rendered environment file, with the Corefile and
    /// CoreDNS paths of this test, plus `extra`.
    pub fn supervisor_env(&self, extra: &[(&str, &str)]) -> BTreeMap<String, String> {
        let goal = self.goal(true);
        let corefile = render::corefile::render(&goal).unwrap_or_else(|e| panic!("{e}"));
        let corefile_path = self.write("Corefile", &corefile);
        let mut env: BTreeMap<String, String> = render::machine::environment(&goal)
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(|l| l.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
            .collect();
        env.insert("LOCALDNS_COREFILE".into(), corefile_path.display().to_string());
        env.insert("LOCALDNS_COREDNS".into(), self.coredns.display().to_string());
        for (k, v) in extra {
            env.insert((*k).into(), (*v).into());
        }
        env
    }

    /// Starts the supervisor in the node namespace with `env` (and `NOTIFY_SOCKET` if given).
    pub fn start_supervisor(&self, env: &BTreeMap<String, String>, notify: Option<&Path>) -> Proc {
        let mut cmd = self.node.cmd(supervisor_binary());
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(env);
        if let Some(socket) = notify {
            cmd.env("NOTIFY_SOCKET", socket);
        }
        spawn_logged(cmd, self.dir.path().join("supervisor.log"))
    }

    pub fn wait_until(&self, what: &str, timeout: Duration, mut ok: impl FnMut(&Lab) -> bool) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if ok(self) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "timed out after {timeout:?} waiting until {what}\n{}",
            self.logs()
        );
    }

    pub fn logs(&self) -> String {
        let mut out = String::new();
        for name in ["supervisor.log", "upstream.log", "cluster.log"] {
            let text = std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(30).collect();
            out.push_str(&format!("--- {name} (last lines) ---\n"));
            for line in tail.into_iter().rev() {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }
}

/// A DNS answer: rcode and the A records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub rcode: ResponseCode,
    pub a: Vec<Ipv4Addr>,
}

/// One A query to `server:53` over UDP (or TCP), from the calling thread's namespace.
pub fn query(server: Ipv4Addr, name: &str, tcp: bool) -> Result<Answer, String> {
    let mut msg = Message::query();
    msg.metadata.recursion_desired = true;
    msg.add_query(Query::query(
        Name::from_ascii(name).map_err(|e| e.to_string())?,
        RecordType::A,
    ));
    let bytes = msg.to_vec().map_err(|e| e.to_string())?;
    let timeout = Duration::from_secs(2);
    let raw = if tcp {
        let mut stream = TcpStream::connect_timeout(&SocketAddr::from((server, 53)), timeout)
            .map_err(|e| format!("connect: {e}"))?;
        stream.set_read_timeout(Some(timeout)).unwrap();
        let mut framed = (bytes.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&bytes);
        stream.write_all(&framed).map_err(|e| e.to_string())?;
        let mut len = [0u8; 2];
        stream.read_exact(&mut len).map_err(|e| format!("read: {e}"))?;
        let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
        stream.read_exact(&mut buf).map_err(|e| format!("read: {e}"))?;
        buf
    } else {
        let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).map_err(|e| e.to_string())?;
        socket.set_read_timeout(Some(timeout)).unwrap();
        socket.send_to(&bytes, (server, 53)).map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; 4096];
        let n = socket.recv(&mut buf).map_err(|e| format!("receive: {e}"))?;
        buf.truncate(n);
        buf
    };
    let answer = Message::from_vec(&raw).map_err(|e| e.to_string())?;
    let a = answer
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(a.0),
            _ => None,
        })
        .collect();
    Ok(Answer {
        rcode: answer.metadata.response_code,
        a,
    })
}

/// `GET http://<addr>/metrics`, from the calling thread's namespace.
pub fn metrics(addr: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    text
}

/// The sum of every sample of `metric` (all label sets).
pub fn metric_sum(text: &str, metric: &str) -> f64 {
    metric_sum_with_label(text, metric, "")
}

/// The sum of the samples of `metric` whose label set contains `label` (such as `type="A"`).
pub fn metric_sum_with_label(text: &str, metric: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.split(['{', ' ']).next() == Some(metric))
        .filter(|l| l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A notify socket the test owns, like systemd's.
pub struct NotifySocket {
    pub socket: UnixDatagram,
    pub path: PathBuf,
}

impl NotifySocket {
    pub fn bind(dir: &Path) -> NotifySocket {
        let path = dir.join("notify.sock");
        let socket = UnixDatagram::bind(&path).expect("bind notify socket");
        NotifySocket { socket, path }
    }

    /// The next message within `timeout`, if any.
    pub fn recv(&self, timeout: Duration) -> Option<String> {
        self.socket.set_read_timeout(Some(timeout)).unwrap();
        let mut buf = [0u8; 4096];
        let n = self.socket.recv(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    /// The messages queued now, without waiting for more: a supervisor pinging its watchdog
    /// keeps sending, so reading until a pause in its messages can take minutes under TCG.
    pub fn queued(&self) -> Vec<String> {
        self.socket.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 4096];
        let mut messages = Vec::new();
        while let Ok(n) = self.socket.recv(&mut buf) {
            messages.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        self.socket.set_nonblocking(false).unwrap();
        messages
    }

    /// Messages until one contains `needle` (returned with those before it), within `timeout`.
    pub fn until(&self, needle: &str, timeout: Duration) -> Result<Vec<String>, Vec<String>> {
        let deadline = Instant::now() + timeout;
        let mut seen = Vec::new();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.recv(left) {
                Some(msg) => {
                    let found = msg.contains(needle);
                    seen.push(msg);
                    if found {
                        return Ok(seen);
                    }
                }
                None => break,
            }
        }
        Err(seen)
    }
}

/// Takes the main thread back to the network namespace it started in, on drop. [`Lab::build`]
/// moves the calling thread into the node namespace, and dropping the [`Lab`] kills every process
/// `ip netns pids` finds there: this one too (exit 137, the node namespace left behind), unless it
/// left first.
pub struct BackHome(pub std::fs::File);

impl BackHome {
    /// The calling thread's namespace now.
    pub fn here() -> std::io::Result<std::fs::File> {
        std::fs::File::open("/proc/thread-self/ns/net")
    }
}

impl Drop for BackHome {
    fn drop(&mut self) {
        if let Err(e) = nix::sched::setns(&self.0, nix::sched::CloneFlags::CLONE_NEWNET) {
            eprintln!("could not go back to the starting network namespace: {e}");
        }
    }
}

/// Clock ticks per second, the unit of utime and stime in `/proc/<pid>/stat`.
pub fn clock_ticks() -> anyhow::Result<u64> {
    // SAFETY: sysconf reads a constant of the system; no memory of ours is involved.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks)
        .ok()
        .filter(|&t| t > 0)
        .ok_or_else(|| anyhow::anyhow!("sysconf(_SC_CLK_TCK) returned {ticks}"))
}

pub fn millicores(ticks: u64, clk_tck: u64, seconds: f64) -> f64 {
    ticks as f64 / clk_tck as f64 / seconds * 1000.0
}

/// A benchmark's lab on this host: the real CoreDNS from the lab cache, the listeners on `lo`
/// (this host's kernel may lack dummy links; the tests use the link), the calling thread in the
/// node namespace. `home` is declared first, so the thread goes back home before the lab's
/// namespaces go, on errors too.
pub struct BenchLab {
    pub home: BackHome,
    pub lab: Lab,
}

impl BenchLab {
    /// Fails at once, naming the build command, when CoreDNS or the supervisor is missing.
    pub fn build() -> anyhow::Result<BenchLab> {
        use anyhow::Context as _;
        let cache = harness::cache::Cache::open().context("opening the lab cache")?;
        let coredns = harness::images::coredns::require(&cache)
            .context("the benchmark runs the real CoreDNS")?
            .binary;
        supervisor_binary();
        let home = BackHome(BackHome::here().context("opening /proc/thread-self/ns/net")?);
        let lab = Lab::build(true, Listeners::Loopback, coredns);
        lab.node.enter();
        Ok(BenchLab { home, lab })
    }
}

/// Argument `i` of a benchmark's command line as a number, `default` when absent.
pub fn parse_arg<T: std::str::FromStr>(
    args: &[String],
    i: usize,
    name: &str,
    default: T,
) -> anyhow::Result<T> {
    match args.get(i) {
        None => Ok(default),
        Some(s) => s
            .parse()
            .map_err(|_| anyhow::anyhow!("{name} must be a whole number, not {s:?}")),
    }
}
