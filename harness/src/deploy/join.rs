//! Joining a booted lab VM to its lab's cluster in one call, for `harness lab up` and
//! `harness bench node`: publish the node artifacts, deploy the agent and run `start`, wait
//! for the Node to be Ready; and the text telling a person how to reach the node.
//!
//! An offline node config (`"offline": true`) first cuts the VM off from the artifact server,
//! shows that from inside the VM and hands it the offline bundle ([`super::offline`]); once
//! the Node is Ready the artifact server must have logged no request.

use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::Node;

use super::error::DeployError;
use super::offline::{self, OfflineError};
use super::ready::{NotReady, ready_since, wait_node_ready_showing};
use super::{DeployedNode, deploy_node_as};
use crate::artifacts::{ArtifactsError, LabArtifacts};
use crate::cache::{Cache, CacheError};
use crate::controlplane::ControlPlaneError;
use crate::lab::Lab;
use crate::node_config::{NodeConfig, NodeConfigError};
use crate::vm::Vm;
use agent::error_chain::Chain;

/// The Node's deadline to become Ready once `start` returned, in VM command deadlines
/// (30 s under KVM, 120 s under TCG): 2.5 min, 10 min.
pub const READY_COMMAND_DEADLINES: u32 = 5;

#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error("lab {lab} has no control plane")]
    NoControlPlane { lab: String },
    /// `harness lab up`'s node config could not be read.
    #[error(transparent)]
    NodeConfig(#[from] NodeConfigError),
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error(transparent)]
    Artifacts(#[from] ArtifactsError),
    #[error(transparent)]
    Deploy(#[from] DeployError),
    #[error("offline node: {0}")]
    Offline(#[from] OfflineError),
    #[error("reaching the API server: {0}")]
    Client(Box<ControlPlaneError>),
    #[error("starting a tokio runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("{source}\nevidence in {}", evidence.display())]
    NotReady {
        #[source]
        source: NotReady,
        evidence: std::path::PathBuf,
    },
}

/// A node that joined: its deployment, its Ready Node, and when things happened.
#[derive(Debug, Clone)]
pub struct Joined {
    pub artifacts: LabArtifacts,
    pub deployed: DeployedNode,
    pub node: Node,
    /// The host's clock when `start` was run.
    pub started_at: SystemTime,
    /// From running `start` to the Node's Ready condition turning True (the API server's
    /// clock, whole seconds), or to the harness seeing it Ready when the condition has no time.
    pub ready_after: Duration,
}

/// Publishes `lab`'s artifacts, deploys `node` onto `vm` and waits for the Node to be Ready.
/// Evidence of a failure goes under `$LAB_ARTIFACTS_DIR/<test>/<vm>/`.
pub fn join(lab: &Lab, vm: &Vm, node: &NodeConfig, cache: &Cache, test: &str) -> Result<Joined, JoinError> {
    let cluster = lab
        .cluster()
        .ok_or_else(|| JoinError::NoControlPlane { lab: lab.name() })?;
    let step = Instant::now();
    let artifacts = crate::artifacts::publish(lab, cache)?;
    eprintln!(
        "==> node artifacts published at {} in {:.1}s",
        artifacts.base_url,
        step.elapsed().as_secs_f64()
    );
    let offline_bundle = if node.offline {
        Some(go_offline(lab, vm, &artifacts)?)
    } else {
        None
    };
    let started_at = SystemTime::now();
    let deployed = deploy_node_as(lab, vm, node, &artifacts, test)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(JoinError::Runtime)?;
    let client = runtime
        .block_on(cluster.client())
        .map_err(|e| JoinError::Client(Box::new(e)))?;
    let timeout = vm.deadlines().command * READY_COMMAND_DEADLINES;
    let step = crate::progress::Step::start(format!("waiting for Node {} to be Ready", deployed.name));
    let waited = runtime.block_on(wait_node_ready_showing(
        &client,
        &deployed.name,
        timeout,
        &|now| step.line(&format!("Node {}: {now}", deployed.name)),
    ));
    step.finish();
    let ready = match waited {
        Ok(ready) => ready,
        Err(source) => {
            let evidence = super::evidence::collect(vm, test, &source.to_string(), &[]);
            return Err(JoinError::NotReady { source, evidence });
        }
    };
    let ready_after = ready_since(&ready)
        .and_then(|t| t.duration_since(started_at).ok())
        .unwrap_or_else(|| started_at.elapsed().unwrap_or_default());
    eprintln!(
        "==> Node {} Ready {:.0}s after `start` began",
        deployed.name,
        ready_after.as_secs_f64()
    );
    if let Some((bundle, probed)) = &offline_bundle {
        offline::ensure_no_requests(lab, probed.rejected_after_probe)?;
        eprintln!(
            "==> offline: every artifact came from {bundle} in the VM; the artifact server logged no request"
        );
    }
    Ok(Joined {
        artifacts,
        deployed,
        node: ready,
        started_at,
        ready_after,
    })
}

/// For an offline node: cuts `vm` off from the artifact server, proves it from inside the VM
/// and hands it the bundle; returns where the bundle is in the VM and what the probe saw.
fn go_offline(
    lab: &Lab,
    vm: &Vm,
    artifacts: &LabArtifacts,
) -> Result<(&'static str, offline::NoRoute), JoinError> {
    let nic = super::lab_values::nic_of(lab, vm)?;
    offline::cut_off(lab, nic.ip)?;
    Ok(offline::prove_and_hand_over(lab, vm, artifacts)?)
}

/// How to reach a joined node: a shell in the VM and in its machine, kubectl with the admin
/// kubeconfig, the agent's config and output.
pub fn how_to(lab: &Lab, vm: &Vm, deployed: &DeployedNode) -> String {
    let name = vm.name();
    let mut text = format!(
        "Node {} is Ready (LocalDNS {}), node IP {}, pod CIDR {}.\n\
         \x20 shell in the VM:       harness vm shell {name}            (leave with Ctrl-])\n\
         \x20 the machine:           `machinectl shell kube1` in the VM's shell; from here e.g.\n\
         \x20                        harness vm exec {name} -- systemctl --machine=kube1 status localdns kubelet containerd\n\
         \x20 agent config:          /etc/unbounded/agent/config.json in the VM; `start` output in {}/\n",
        deployed.name,
        if deployed.config.local_dns.as_ref().and_then(|l| l.enabled) == Some(true) {
            "on: localdns.service in machine kube1"
        } else {
            "off"
        },
        deployed.node_ip,
        deployed.pod_cidr,
        super::evidence::GUEST_LOG_DIR,
    );
    if let Some(source) = deployed
        .config
        .offline_artifacts
        .as_ref()
        .and_then(|o| o.source.as_deref())
    {
        text += &format!(
            "  offline:               artifacts from the bundle at {source} in the VM; the artifact \
             server is blocked for {} (No route to host)\n",
            deployed.node_ip
        );
    }
    if let Some(cluster) = lab.cluster() {
        text += &format!(
            "  kubeconfig (admin):    {}\n\
             \x20 kubectl:               {} --kubeconfig {} get nodes -o wide\n",
            cluster.admin_kubeconfig.display(),
            cluster.kubectl.display(),
            cluster.admin_kubeconfig.display(),
        );
    }
    text
}

/// For `harness lab up`: joins the node of `node_config` on `vm` (evidence under
/// `$LAB_ARTIFACTS_DIR/lab-up/`), printing how to reach it, or the error and that the lab stays
/// up for a look (`stop` says how to end it). Returns whether the node joined.
pub fn join_and_report(lab: &Lab, vm: &Vm, node_config: &std::path::Path, stop: &str) -> bool {
    let result = (|| -> Result<Joined, JoinError> {
        let node = NodeConfig::load(node_config)?;
        let cache = Cache::open()?;
        join(lab, vm, &node, &cache, "lab-up")
    })();
    match result {
        Ok(joined) => {
            eprintln!("\n==> {}", how_to(lab, vm, &joined.deployed));
            true
        }
        Err(err) => {
            eprintln!(
                "\nerror: the node did not join: {}\n\
                 ==> the lab and VM {} stay up so you can look (see below); {stop} to stop",
                Chain(&err),
                vm.name()
            );
            false
        }
    }
}
