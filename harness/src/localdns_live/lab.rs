//! [`Lab`]: one live LocalDNS — the node namespace with both listeners and our table, the peer
//! namespaces with the upstream and cluster DNS servers (the real CoreDNS), and what the
//! supervisor is started with.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use agent::exec;
use agent::goal::{self, HostFacts};
use agent::hostnet::link::Netlink;
use agent::hostnet::{LINK_NAME, NetworkSpec};
use agent::names::Slot;
use agent::render;

use super::error::{LiveError, io_err};
use super::netns::Netns;
use super::process::Proc;
use super::{
    CLUSTER, CLUSTER_DNS, METRICS, NODE, NODE_TO_CLUSTER, NODE_TO_UPSTREAM, UPSTREAM, UPSTREAM_METRICS,
};

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A short id unique in this process and among concurrent processes, for netns and link names.
fn unique_id() -> String {
    format!(
        "{}{}",
        std::process::id() % 100_000,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
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

/// A veth pair from `a` (`a_ip`/30) to `b` (`b_ip`/30), both ends up.
fn veth(a: &Netns, a_ip: Ipv4Addr, b: &Netns, b_ip: Ipv4Addr, id: &str, tag: &str) -> Result<(), LiveError> {
    let (an, bn) = (format!("v{id}{tag}a"), format!("v{id}{tag}b"));
    exec::run(Command::new("ip").args([
        "link", "add", &an, "netns", &a.name, "type", "veth", "peer", "name", &bn, "netns", &b.name,
    ]))?;
    a.run(&["ip", "addr", "add", &format!("{a_ip}/30"), "dev", &an])?;
    b.run(&["ip", "addr", "add", &format!("{b_ip}/30"), "dev", &bn])?;
    a.run(&["ip", "link", "set", &an, "up"])?;
    b.run(&["ip", "link", "set", &bn, "up"])?;
    Ok(())
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

/// The validated agent config of the node.
pub fn config(notrack_replies: bool) -> Result<agent::validate::Config, LiveError> {
    Ok(agent::validate::parse(&config_text(notrack_replies))?)
}

/// Where the listener addresses live in the node namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listeners {
    /// On the `localdns` dummy link, with our table, both made by `agent::hostnet::apply`, as on a
    /// node: the guest tests (Debian's kernel in a lab VM).
    DummyLink,
    /// On `lo`, with our table from the same rendered script (`nft -f`): only for the benchmarks
    /// (`crate::bench`) on a host whose kernel has no dummy links.
    Loopback,
}

impl Lab {
    /// Namespaces, links, the node's nft table and both peer DNS servers (not yet LocalDNS
    /// itself), in a guest: the listeners on the dummy link, the CoreDNS the runner handed over.
    pub fn new(notrack_replies: bool) -> Result<Lab, LiveError> {
        Lab::build(notrack_replies, Listeners::DummyLink, super::guest_coredns()?)
    }

    /// [`Lab::new`] with the listeners' place and the CoreDNS binary chosen by the caller. Leaves
    /// the calling thread in the node namespace.
    pub fn build(notrack_replies: bool, listeners: Listeners, coredns: PathBuf) -> Result<Lab, LiveError> {
        let id = unique_id();
        let node = Netns::new("n", &id)?;
        let peer_upstream = Netns::new("u", &id)?;
        let peer_cluster = Netns::new("c", &id)?;
        veth(&node, NODE_TO_UPSTREAM, &peer_upstream, UPSTREAM, &id, "u")?;
        veth(&node, NODE_TO_CLUSTER, &peer_cluster, CLUSTER_DNS, &id, "c")?;
        let config = config(notrack_replies)?;
        let local_dns = config
            .local_dns
            .as_ref()
            .expect("the live lab's config enables LocalDNS");
        let script = agent::hostnet::nft_script(&config, local_dns);
        let dir = tempfile::tempdir().map_err(io_err("creating", std::env::temp_dir()))?;
        node.enter()?;
        match listeners {
            Listeners::DummyLink => {
                // The agent's own apply, in the node namespace: the `localdns` dummy link holding
                // both listener /32s and the `ip unbounded_localdns` table from the rendered script.
                let spec = NetworkSpec::from_config(local_dns);
                agent::hostnet::apply(&spec, &script).map_err(|source| LiveError::Apply {
                    netns: node.name.clone(),
                    source: Box::new(source),
                })?;
                let link = Netlink::open()?.observe(LINK_NAME)?;
                match link {
                    Some(link) if link.kind.as_deref() == Some("dummy") && link.ipv4.len() == 2 => {}
                    other => {
                        return Err(LiveError::NotADummyLink {
                            observed: format!("{other:?}"),
                        });
                    }
                }
            }
            Listeners::Loopback => {
                for ip in [NODE, CLUSTER] {
                    node.run(&["ip", "addr", "add", &format!("{ip}/32"), "dev", "lo"])?;
                }
                let path = dir.path().join("localdns.nft");
                std::fs::write(&path, &script).map_err(io_err("writing", &path))?;
                node.run(&["nft", "-f", &path.display().to_string()])?;
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
        lab.write("localdns.nft", &script)?;
        lab.upstream_server = Some(lab.start_upstream()?);
        let zone = lab.write("cluster.local.zone", CLUSTER_ZONE)?;
        let cluster_corefile = lab.write(
            "cluster.Corefile",
            &format!(
                "cluster.local:53 {{\n  bind {CLUSTER_DNS}\n  file {}\n}}\n",
                zone.display()
            ),
        )?;
        let mut cmd = lab.peer_cluster.cmd(&lab.coredns);
        cmd.arg("-conf").arg(&cluster_corefile);
        lab.cluster_server = Some(Proc::spawn_logged(cmd, lab.dir.path().join("cluster.log"))?);
        lab.wait_until(
            "the upstream and cluster DNS servers answer",
            Duration::from_secs(60),
            |lab| {
                lab.node.enter().is_ok()
                    && super::query(UPSTREAM, "www.example.test", false).is_ok()
                    && super::query(CLUSTER_DNS, "kubernetes.default.svc.cluster.local", false).is_ok()
            },
        )?;
        Ok(lab)
    }

    /// Starts the upstream DNS server (`example.test`, with metrics) in its peer namespace.
    pub fn start_upstream(&self) -> Result<Proc, LiveError> {
        let zone = self.write("example.test.zone", EXAMPLE_ZONE)?;
        let corefile = self.write(
            "upstream.Corefile",
            &format!(
                "example.test:53 {{\n  bind {UPSTREAM}\n  file {}\n  prometheus {UPSTREAM_METRICS}\n}}\n",
                zone.display()
            ),
        )?;
        let mut cmd = self.peer_upstream.cmd(&self.coredns);
        cmd.arg("-conf").arg(&corefile);
        Proc::spawn_logged(cmd, self.dir.path().join("upstream.log"))
    }

    /// Writes `text` to `name` in the lab's directory; its path.
    pub fn write(&self, name: &str, text: &str) -> Result<PathBuf, LiveError> {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).map_err(io_err("writing", &path))?;
        Ok(path)
    }

    fn goal(&self, notrack_replies: bool) -> Result<agent::goal::LocalDnsGoal, LiveError> {
        let config = config(notrack_replies)?;
        let facts = HostFacts {
            host_resolv_conf: format!("nameserver {UPSTREAM}\n"),
            ..Default::default()
        };
        Ok(goal::resolve(&config, &facts, Slot::Kube1)?
            .local_dns
            .expect("the live lab's config enables LocalDNS"))
    }

    /// The environment the supervisor gets: the rendered environment file, with the Corefile, the
    /// fallback Corefile and CoreDNS paths of this lab, plus `extra`.
    pub fn supervisor_env(&self, extra: &[(&str, &str)]) -> Result<BTreeMap<String, String>, LiveError> {
        let goal = self.goal(true)?;
        let corefile = render::corefile::render(&goal)?;
        let corefile_path = self.write("Corefile", &corefile)?;
        let mut env: BTreeMap<String, String> = render::machine::environment(&goal)
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(|l| l.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
            .collect();
        let fallback_path = self.write("Corefile.fallback", &render::corefile::render_fallback(&goal)?)?;
        env.insert("LOCALDNS_COREFILE".into(), corefile_path.display().to_string());
        env.insert(
            "LOCALDNS_FALLBACK_COREFILE".into(),
            fallback_path.display().to_string(),
        );
        env.insert("LOCALDNS_COREDNS".into(), self.coredns.display().to_string());
        for (k, v) in extra {
            env.insert((*k).into(), (*v).into());
        }
        Ok(env)
    }

    /// Starts the supervisor ([`super::supervisor_binary`]) in the node namespace with `env`
    /// (and `NOTIFY_SOCKET` if given); its log is `supervisor.log`.
    pub fn start_supervisor(
        &self,
        env: &BTreeMap<String, String>,
        notify: Option<&Path>,
    ) -> Result<Proc, LiveError> {
        let mut cmd = self.node.cmd(super::supervisor_binary()?);
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(env);
        if let Some(socket) = notify {
            cmd.env("NOTIFY_SOCKET", socket);
        }
        Proc::spawn_logged(cmd, self.dir.path().join("supervisor.log"))
    }

    /// Waits until `ok`, checked every 100 ms, at most `timeout`; the error holds [`Lab::logs`].
    pub fn wait_until(
        &self,
        what: &str,
        timeout: Duration,
        mut ok: impl FnMut(&Lab) -> bool,
    ) -> Result<(), LiveError> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if ok(self) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(LiveError::Timeout {
            what: what.to_owned(),
            timeout,
            logs: self.logs(),
        })
    }

    /// The last lines of the supervisor's and both servers' logs.
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
