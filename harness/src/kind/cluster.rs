//! A Kind cluster created by Kind's own CLI from the lab's node image, in the engine
//! [`Engine::detect`] chose.
//!
//! The cluster's configuration ([`kind_config`]): one control-plane node, kube-proxy in nftables
//! mode, no default CNI (the node image brings its bridge network), the kubelet allowed on
//! cgroup v1 (`failCgroupV1: false`: this project's machines have a hybrid cgroup hierarchy), and
//! node IPAM off (every lab VM brings its pod CIDR in its agent config).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use agent::exec::{CommandFailed, run, run_stdout};

use super::engine::Engine;
use crate::images::kind_node::{IMAGE_REPOSITORY, KindNodeImage};
use crate::images::kind_tool::KindTool;
use crate::progress::{RunLoggedError, Step, run_logged};

/// The cluster's pod CIDR (every node's `10.244.<k>.0/24` is inside it).
pub const POD_SUBNET: &str = "10.244.0.0/16";
/// The cluster's service CIDR: the `kubernetes` Service is `10.96.0.1`, `kube-dns` `10.96.0.10`.
pub const SERVICE_SUBNET: &str = "10.96.0.0/12";

/// Why a Kind cluster could not be created, found or deleted.
#[derive(Debug, thiserror::Error)]
pub enum KindError {
    #[error("loading the Kind node image {reference} into {engine}")]
    LoadImage {
        reference: String,
        engine: String,
        #[source]
        source: Box<CommandFailed>,
    },
    #[error("kind could not create cluster {name}; {cleanup}; evidence: {log}")]
    Create {
        name: String,
        log: PathBuf,
        /// What became of the half-created cluster.
        cleanup: String,
        #[source]
        source: Box<RunLoggedError>,
    },
    #[error(
        "kind create cluster {name} did not finish within {timeout:?} (LAB_KIND_CREATE_TIMEOUT; it \
         takes under a minute on an idle 2-core machine: is the machine overloaded, or the node's \
         systemd stuck? see the log); it was stopped and {cleanup}; evidence: {log}"
    )]
    CreateTimedOut {
        name: String,
        timeout: Duration,
        log: PathBuf,
        cleanup: String,
    },
    #[error("{variable}={value:?} is not a number of seconds above 0")]
    BadTimeout { variable: &'static str, value: String },
    #[error(transparent)]
    Command(Box<CommandFailed>),
    #[error(transparent)]
    Engine(Box<super::engine::EngineError>),
    #[error("Kind cluster: {0}")]
    Kubeconfig(String),
    #[error("writing {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The cluster's CoreDNS never answered on the `kube-dns` ClusterIP from the lab namespace.
    #[error("the cluster DNS: {0}")]
    ClusterDns(#[source] Box<crate::wait::WaitTimeout>),
}

impl From<CommandFailed> for KindError {
    fn from(err: CommandFailed) -> KindError {
        KindError::Command(Box::new(err))
    }
}

/// A created Kind cluster.
#[derive(Clone, Debug)]
pub struct KindCluster {
    pub name: String,
    /// The admin kubeconfig Kind wrote (context `kind-<name>`), naming the API server's port on
    /// the host's `127.0.0.1`.
    pub kubeconfig: PathBuf,
    engine: Engine,
    kind: PathBuf,
}

/// The Kind configuration of a lab cluster.
pub fn kind_config() -> String {
    format!(
        "\
# Written by the lab's harness (harness::kind::cluster).
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  disableDefaultCNI: true
  kubeProxyMode: nftables
  podSubnet: {POD_SUBNET}
  serviceSubnet: {SERVICE_SUBNET}
kubeadmConfigPatches:
- |
  kind: KubeletConfiguration
  failCgroupV1: false
- |
  kind: ClusterConfiguration
  controllerManager:
    extraArgs:
      allocate-node-cidrs: \"false\"
nodes:
- role: control-plane
"
    )
}

impl KindCluster {
    /// Creates cluster `name` with [`kind_config`] (a stale one of that name is deleted first),
    /// its configuration and kubeconfig in `dir`, Kind's output in `log`.
    pub fn create(
        name: &str,
        engine: &Engine,
        tool: &KindTool,
        image: &KindNodeImage,
        dir: &Path,
        log: &Path,
    ) -> Result<KindCluster, KindError> {
        let timeout = create_timeout()?;
        KindCluster::create_with_config(name, engine, tool, image, dir, &kind_config(), log, timeout)
    }

    /// [`KindCluster::create`] with another Kind configuration, stopped after `timeout` (what
    /// it had made is then removed, as after any failure).
    #[allow(clippy::too_many_arguments)]
    pub fn create_with_config(
        name: &str,
        engine: &Engine,
        tool: &KindTool,
        image: &KindNodeImage,
        dir: &Path,
        config_text: &str,
        log: &Path,
        timeout: Duration,
    ) -> Result<KindCluster, KindError> {
        let cluster = KindCluster::named(name, engine, tool, dir);
        fs::create_dir_all(dir).map_err(|source| KindError::Write {
            path: dir.to_path_buf(),
            source,
        })?;
        let config = dir.join("kind-config.yaml");
        fs::write(&config, config_text).map_err(|source| KindError::Write {
            path: config.clone(),
            source,
        })?;
        ensure_lib_modules()?;
        load_image(engine, image)?;
        if list(engine, tool)?.iter().any(|c| c == name) {
            cluster.delete()?;
        }
        ensure_network(engine, &cluster.network())?;
        let step = Step::start(format!(
            "Kind cluster {name}: kind create cluster ({})",
            engine.kind
        ));
        let started = Instant::now();
        let created = run_logged(
            cluster
                .kind_within(timeout)
                .args(["create", "cluster", "--name", name, "--image", &image.reference])
                .arg("--config")
                .arg(&config)
                .arg("--kubeconfig")
                .arg(&cluster.kubeconfig),
            log,
            &step,
        );
        if let Err(source) = created {
            // Kind removes what it made when it fails by itself, not when it is stopped: the
            // harness removes whatever is left either way.
            let deleted = cluster
                .delete()
                .err()
                .map(|e| format!("kind delete cluster: {e}"));
            // What Kind no longer knows of (a node container it was still creating).
            let left = remove_leftover_nodes(name);
            let cleanup = if left.is_empty() {
                "its containers, volumes and network were removed".to_string()
            } else {
                let mut problems: Vec<String> = deleted.into_iter().collect();
                problems.extend(left);
                format!("removing what it had made failed too: {}", problems.join("; "))
            };
            return Err(if started.elapsed() >= timeout {
                KindError::CreateTimedOut {
                    name: name.to_string(),
                    timeout,
                    log: log.to_path_buf(),
                    cleanup,
                }
            } else {
                KindError::Create {
                    name: name.to_string(),
                    log: log.to_path_buf(),
                    cleanup,
                    source: Box::new(source),
                }
            });
        }
        step.finish();
        Ok(cluster)
    }

    /// Cluster `name` of `engine`, its kubeconfig in `dir` (nothing is created).
    pub(super) fn named(name: &str, engine: &Engine, tool: &KindTool, dir: &Path) -> KindCluster {
        KindCluster {
            name: name.to_string(),
            kubeconfig: dir.join("kubeconfig"),
            engine: engine.clone(),
            kind: tool.binary.clone(),
        }
    }

    /// The engine the cluster's nodes run in.
    pub(super) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The engine network of the cluster's nodes, `kind-<name>`: each lab's Kind cluster has
    /// its own, so two labs' nodes do not reach each other.
    pub fn network(&self) -> String {
        network_of(&self.name)
    }

    /// The control-plane node's container (`<name>-control-plane`).
    pub fn control_plane_container(&self) -> String {
        format!("{}-control-plane", self.name)
    }

    /// The pid of the control-plane node's init on this host (for its network namespace).
    pub fn node_pid(&self) -> Result<u32, KindError> {
        let out = run_stdout(self.engine.command().args([
            "inspect",
            "--format",
            "{{.State.Pid}}",
            &self.control_plane_container(),
        ]))?;
        out.trim()
            .parse()
            .map_err(|_| KindError::Kubeconfig(format!("{} inspect printed pid {out:?}", self.engine.kind)))
    }

    /// Runs `args` in the control-plane node (`<engine> exec`); its stdout.
    pub fn exec_in_node(&self, args: &[&str]) -> Result<String, CommandFailed> {
        run_stdout(
            self.engine
                .command()
                .args(["exec", &self.control_plane_container()])
                .args(args),
        )
    }

    /// `kind delete cluster`: the node containers and their volumes; then the cluster's network.
    /// The node is killed first: its systemd would otherwise take the engine's whole stop timeout
    /// (10 s) to shut down a cluster that is thrown away (docs/perf.md, "The lab's Kind cluster").
    pub fn delete(&self) -> Result<(), KindError> {
        // A node already gone, or an engine that refuses, leaves the stop to Kind.
        let _ = run(self
            .engine
            .command()
            .args(["kill", &self.control_plane_container()]));
        run(self
            .kind()
            .args(["delete", "cluster", "--name", &self.name])
            .arg("--kubeconfig")
            .arg(&self.kubeconfig))?;
        // Kind's Docker provider leaves a restored node's named `/var` volume (`crate::kind::saved`).
        let engine = self.engine.kind.name();
        remove_node_volumes(engine, &self.control_plane_container())
            .and_then(|()| remove_network(engine, &self.network()))
            .map_err(|e| KindError::Command(Box::new(e)))
    }

    /// How other processes run Kind's CLI against this cluster (the lab's record).
    pub fn record(&self) -> crate::controlplane::KindRecord {
        let command = self.kind();
        crate::controlplane::KindRecord {
            name: self.name.clone(),
            kind: self.kind.clone(),
            env: command
                .get_envs()
                .filter_map(|(k, v)| Some((k.to_str()?.to_string(), v?.to_str()?.to_string())))
                .collect(),
        }
    }

    /// Kind's CLI for this cluster run by `timeout`, which stops it after `limit` (and kills it
    /// 10 s later if it is still there).
    fn kind_within(&self, limit: Duration) -> Command {
        let kind = self.kind();
        let mut command = Command::new("timeout");
        command
            .args(["--kill-after=10", &format!("{}", limit.as_secs().max(1))])
            .arg(kind.get_program())
            .args(kind.get_args());
        for (key, value) in kind.get_envs() {
            if let Some(value) = value {
                command.env(key, value);
            }
        }
        command
    }

    /// Kind's CLI for this cluster: the engine's environment and the cluster's network.
    pub(super) fn kind(&self) -> Command {
        let mut command = Command::new(&self.kind);
        command
            .envs(self.engine.env())
            .env(self.engine.kind.network_env(), self.network());
        command
    }
}

/// The variable that bounds `kind create cluster`, in seconds.
pub const CREATE_TIMEOUT_VAR: &str = "LAB_KIND_CREATE_TIMEOUT";
/// `kind create cluster` takes 12–16 s on an idle 2-core machine; five minutes leaves room for a
/// loaded one.
const DEFAULT_CREATE_TIMEOUT: Duration = Duration::from_secs(300);

/// How long `kind create cluster` may take: [`CREATE_TIMEOUT_VAR`] seconds, else five minutes.
pub fn create_timeout() -> Result<Duration, KindError> {
    parse_create_timeout(std::env::var(CREATE_TIMEOUT_VAR).ok().as_deref())
}

fn parse_create_timeout(value: Option<&str>) -> Result<Duration, KindError> {
    match value.map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(DEFAULT_CREATE_TIMEOUT),
        Some(v) => match v.parse::<u64>() {
            Ok(secs) if secs > 0 => Ok(Duration::from_secs(secs)),
            _ => Err(KindError::BadTimeout {
                variable: CREATE_TIMEOUT_VAR,
                value: v.to_string(),
            }),
        },
    }
}

/// The engine network of Kind cluster `name` ([`KindCluster::network`]).
pub fn network_of(name: &str) -> String {
    format!("kind-{name}")
}

/// Creates the engine network `network` for one cluster's nodes unless it exists (Kind then
/// uses it as it is): Podman's is isolated (`isolate=true`: no traffic to or from another
/// isolated network, so two labs' Kind nodes do not reach each other) and has IPv6 where the
/// host allows it, as Kind's own; Docker isolates its bridge networks from each other itself.
pub fn ensure_network(engine: &Engine, network: &str) -> Result<(), KindError> {
    if run(engine.command().args(["network", "inspect", network])).is_ok() {
        return Ok(());
    }
    let create = |extra: &[&str]| {
        run(engine
            .command()
            .args(["network", "create"])
            .args(extra)
            .arg(network))
    };
    let made = match engine.kind {
        super::engine::EngineKind::Podman => {
            create(&["--ipv6", "-o", "isolate=true"]).or_else(|_| create(&["-o", "isolate=true"]))
        }
        super::engine::EngineKind::Docker => create(&[]),
    };
    made.map(|_| ()).map_err(|e| KindError::Command(Box::new(e)))
}

/// Removes the volumes of `engine` (the program) labelled `<node>=true`: the node's `/var`, as
/// Kind's Podman provider and a restored node label it.
fn remove_node_volumes(engine: &str, node: &str) -> Result<(), CommandFailed> {
    let filter = format!("label={node}=true");
    let volumes = run_stdout(Command::new(engine).args(["volume", "ls", "-q", "--filter", &filter]))?;
    let volumes: Vec<&str> = volumes.split_whitespace().collect();
    if !volumes.is_empty() {
        run(Command::new(engine).args(["volume", "rm", "-f"]).args(&volumes))?;
    }
    Ok(())
}

/// Removes network `network` of `engine` (the program) unless it is gone already.
fn remove_network(engine: &str, network: &str) -> Result<(), CommandFailed> {
    let exists = run(Command::new(engine).args(["network", "inspect", network])).is_ok();
    if exists {
        run(Command::new(engine).args(["network", "rm", "-f", network]))?;
    }
    Ok(())
}

/// Removes the node containers, volumes and network of Kind cluster `name` that a killed harness
/// left in any engine on this host (what `kind delete cluster` and [`KindCluster::delete`]
/// remove), without Kind or a probe: the stale-lab sweep and `harness lab down` call it for every
/// lab. Returns what it could not remove.
pub fn remove_leftover_nodes(name: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for engine in ["podman", "docker"] {
        let label = format!("label=io.x-k8s.kind.cluster={name}");
        let Ok(listed) = run_stdout(Command::new(engine).args(["ps", "-a", "-q", "--filter", &label])) else {
            continue;
        };
        let containers: Vec<&str> = listed.split_whitespace().collect();
        if containers.is_empty() {
            if let Err(e) = remove_network(engine, &network_of(name)) {
                problems.push(format!("{engine} network rm of Kind cluster {name}: {e}"));
            }
            continue;
        }
        let names = run_stdout(
            Command::new(engine)
                .args(["inspect", "--format", "{{.Name}}"])
                .args(&containers),
        )
        .unwrap_or_default();
        if let Err(e) = run(Command::new(engine).args(["rm", "-f", "-v"]).args(&containers)) {
            problems.push(format!("{engine} rm of Kind cluster {name}'s nodes: {e}"));
        }
        for node in names
            .lines()
            .map(|n| n.trim().trim_start_matches('/'))
            .filter(|n| !n.is_empty())
        {
            if let Err(e) = remove_node_volumes(engine, node) {
                problems.push(format!("{engine} volume rm of node {node}: {e}"));
            }
        }
        if let Err(e) = remove_network(engine, &network_of(name)) {
            problems.push(format!("{engine} network rm of Kind cluster {name}: {e}"));
        }
    }
    problems
}

/// Kind bind-mounts the host's `/lib/modules` into every node and the engine refuses a missing
/// source: a host without loadable modules gets the empty directory (idempotent).
pub fn ensure_lib_modules() -> Result<(), KindError> {
    let path = Path::new(LIB_MODULES);
    fs::create_dir_all(path).map_err(|source| KindError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// The host directory Kind mounts into its nodes.
pub const LIB_MODULES: &str = "/lib/modules";

/// `kind get clusters`: the clusters of the engine.
pub fn list(engine: &Engine, tool: &KindTool) -> Result<Vec<String>, CommandFailed> {
    let out = run_stdout(
        Command::new(&tool.binary)
            .envs(engine.env())
            .args(["get", "clusters"]),
    )?;
    Ok(out
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect())
}

/// Imports the node image into the engine unless it has it (`import` with Kind's entrypoint).
pub fn load_image(engine: &Engine, image: &KindNodeImage) -> Result<(), KindError> {
    let has = run(engine.command().args(["image", "inspect", &image.reference])).is_ok();
    if has {
        return Ok(());
    }
    let step = Step::start(format!(
        "Kind node image: {} import {}",
        engine.kind, image.reference
    ));
    run(engine
        .command()
        .args([
            "import",
            "--change",
            "ENTRYPOINT [\"/usr/local/bin/entrypoint\", \"/sbin/init\"]",
            "--change",
            "STOPSIGNAL SIGRTMIN+3",
            "--change",
            "ENV container=docker",
        ])
        .arg(&image.tarball)
        .arg(&image.reference))
    .map_err(|source| KindError::LoadImage {
        reference: image.reference.clone(),
        engine: engine.kind.to_string(),
        source: Box::new(source),
    })?;
    step.finish();
    remove_older_node_images(engine, &image.reference);
    Ok(())
}

/// Removes the engine's other tags of the node image's repository (older builds, ~1 GB each);
/// one a container still uses stays (the engine refuses), and nothing else is touched.
fn remove_older_node_images(engine: &Engine, keep: &str) {
    let Ok(listed) = run_stdout(
        engine
            .command()
            .args(["images", "--format", "{{.Repository}}:{{.Tag}}"]),
    ) else {
        return;
    };
    for old in listed
        .lines()
        .map(str::trim)
        .filter(|r| r.starts_with(&format!("{IMAGE_REPOSITORY}:")) && *r != keep)
    {
        let _ = run(engine.command().args(["rmi", old]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_create_timeout_is_five_minutes_unless_set_and_a_bad_value_is_named() {
        assert_eq!(parse_create_timeout(None).unwrap(), Duration::from_secs(300));
        assert_eq!(parse_create_timeout(Some("")).unwrap(), Duration::from_secs(300));
        assert_eq!(parse_create_timeout(Some("45")).unwrap(), Duration::from_secs(45));
        for bad in ["0", "ten", "-3", "1.5"] {
            let err = parse_create_timeout(Some(bad)).unwrap_err().to_string();
            assert!(
                err.contains("LAB_KIND_CREATE_TIMEOUT") && err.contains(bad),
                "{err}"
            );
        }
    }

    #[test]
    fn the_kind_config_allows_cgroup_v1_turns_ipam_off_and_brings_no_cni() {
        let config: serde_yaml_ng::Value = serde_yaml_ng::from_str(&kind_config()).unwrap();
        assert_eq!(config["networking"]["disableDefaultCNI"], true);
        assert_eq!(config["networking"]["kubeProxyMode"], "nftables");
        assert_eq!(config["networking"]["serviceSubnet"], SERVICE_SUBNET);
        let patches: Vec<serde_yaml_ng::Value> = config["kubeadmConfigPatches"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|p| serde_yaml_ng::from_str(p.as_str().unwrap()).unwrap())
            .collect();
        assert_eq!(patches[0]["failCgroupV1"], false);
        assert_eq!(
            patches[1]["controllerManager"]["extraArgs"]["allocate-node-cidrs"],
            "false"
        );
        assert_eq!(config["nodes"].as_sequence().unwrap().len(), 1);
    }
}
