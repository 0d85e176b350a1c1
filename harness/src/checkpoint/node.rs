//! A joined node saved into a checkpoint and resumed from one, in the harness's terms (a
//! [`Lab`], a [`Vm`], the [`DeployedNode`]): what the scenarios and `harness lab up` share.
//!
//! * [`prepare_host`]: what is done to a VM before the deploy of a node that is checkpointed;
//! * [`inputs`]: the checkpoint key's inputs for a node config, as things are now;
//! * [`save`]: a joined node into an entry (the VM, then the control plane's state);
//! * [`resume`]: a lab whose control plane starts from a copy of the saved state, the node's VM
//!   resumed, then waits until the kubelet renewed its Lease in that cluster and the Node is
//!   Ready, and the cluster DNS answers.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

use super::{CONTROL_PLANE, Checkpoint, CheckpointError, CheckpointInputs, NodeInputs, Saved};
use crate::artifacts::{ArtifactsError, LabArtifacts};
use crate::cache::Cache;
use crate::controlplane::ControlPlaneError;
use crate::deploy::DeployedNode;
use crate::deploy::offline::{self, NoRoute, OfflineError};
use crate::deploy::ready::{NotReady, wait_node_ready};
use crate::lab::{Lab, LabError, LabSpec};
use crate::node_config::NodeConfig;
use crate::vm::{Accel, BootImage, Vm, VmError, VmSpec};
use crate::wait::{Attempt, WaitTimeout};
use agent::error_chain::Chain;

/// The search line [`prepare_host`] adds to the VM's resolv.conf (a tab on purpose: the agent
/// must tolerate them).
pub const HOST_SEARCH: &str = "search\tlab.test";
/// The options line [`prepare_host`] adds.
pub const HOST_OPTIONS: &str = "options ndots:2 timeout:2";
/// What [`prepare_host`] does, for the checkpoint's key (change it with the function).
pub const PREPARED: &str = "host resolv.conf: search lab.test, options ndots:2 timeout:2";

/// Why a node could not be saved or resumed.
#[derive(Debug, thiserror::Error)]
pub enum NodeCheckpointError {
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Lab(#[from] LabError),
    #[error(transparent)]
    Artifacts(#[from] ArtifactsError),
    #[error(transparent)]
    Vm(Box<VmError>),
    /// QEMU could not load the checkpoint: it is unusable (remove it, join for real).
    #[error("QEMU could not load the node checkpoint {dir}: {source}")]
    NotLoaded {
        dir: PathBuf,
        #[source]
        source: Box<VmError>,
    },
    #[error("reaching the lab's API server: {0}")]
    Client(#[from] ControlPlaneError),
    #[error("the lab has no control plane")]
    NoControlPlane,
    /// A Kind checkpoint is saved only once the node's kube-proxy has synced its rules.
    #[error("before saving the node: {0}")]
    KubeProxy(#[source] crate::wait::WaitTimeout),
    #[error("starting a tokio runtime: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("{what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("the lab gave the VM {got}, the checkpoint's node has {want}")]
    Address {
        got: std::net::Ipv4Addr,
        want: std::net::Ipv4Addr,
    },
    #[error(
        "the kubelet of {node} did not renew its Lease (kube-node-lease/{node}, resourceVersion \
         {saved:?} in the checkpoint) within {waited:?} of the resume"
    )]
    LeaseNotRenewed {
        node: String,
        saved: Option<String>,
        waited: Duration,
    },
    #[error(transparent)]
    NotReady(#[from] NotReady),
    #[error("the resumed node's cluster DNS: {0}")]
    ClusterDns(#[source] WaitTimeout),
    #[error("offline node: {0}")]
    Offline(#[from] OfflineError),
    #[error("{what}: {why}")]
    Host { what: String, why: String },
}

impl From<VmError> for NodeCheckpointError {
    fn from(err: VmError) -> Self {
        NodeCheckpointError::Vm(Box::new(err))
    }
}

/// Before the deploy of a node that is checkpointed: gives the VM's resolver the `search` and
/// `options` lines a real host has (lab-net writes one nameserver line only), so the agent has
/// them to carry into the machine.
pub fn prepare_host(vm: &Vm) -> Result<(), NodeCheckpointError> {
    let before = String::from_utf8_lossy(&vm.read_file("/etc/resolv.conf")?).into_owned();
    let lines: Vec<&str> = before.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.len() != 1 || !lines[0].starts_with("nameserver") {
        return Err(NodeCheckpointError::Host {
            what: format!("VM {}: /etc/resolv.conf", vm.name()),
            why: format!("it should hold one nameserver line only (lab-net), it holds:\n{before}"),
        });
    }
    let text = format!("{}\n{HOST_SEARCH}\n{HOST_OPTIONS}\n", before.trim_end());
    vm.write_file("/etc/resolv.conf", text.as_bytes(), 0o644)?;
    eprintln!("==> the VM's /etc/resolv.conf before deploying:\n{text}");
    Ok(())
}

/// The inputs of the checkpoint of `node` (loaded from `node_config`) as things are now.
pub fn inputs(
    cache: &Cache,
    node: &NodeConfig,
    node_config: &Path,
) -> Result<CheckpointInputs, NodeCheckpointError> {
    let kind_node = crate::images::kind_node::require(cache).map_err(|e| NodeCheckpointError::Host {
        what: "the Kind node image".into(),
        why: Chain(&e).to_string(),
    })?;
    let control_plane = super::kind_control_plane(&kind_node.reference);
    let image = crate::images::host::require(cache).map_err(|e| NodeCheckpointError::Host {
        what: "the host image".into(),
        why: Chain(&e).to_string(),
    })?;
    let probe = VmSpec::new("checkpoint", node.name(), BootImage::from(&image));
    let accel = Accel::from_env().map_err(VmError::from)?;
    let vm_state_key = crate::vm::state::StateInputs::for_spec(&probe, accel)
        .map_err(|e| NodeCheckpointError::Host {
            what: "the image's saved VM state".into(),
            why: e.to_string(),
        })?
        .key()
        .hex();
    let agent = crate::deploy::plan::host_agent_binary(&crate::deploy::plan::target_dir());
    // A checkpoint is keyed by the agent binary: a stale one must not pick (or make) one.
    crate::deploy::agent_binary::ensure_fresh(&agent, &crate::repo::root()).map_err(|e| {
        NodeCheckpointError::Host {
            what: "the agent binary".into(),
            why: e.to_string(),
        }
    })?;
    Ok(CheckpointInputs::new(&NodeInputs {
        vm_state_key: &vm_state_key,
        agent_binary: &agent,
        node_config,
        artifacts_key: &crate::artifacts::published_key(cache)?,
        crd_dir: &crate::lab::cluster::crd_dir(),
        prepare: PREPARED,
        control_plane: &control_plane,
    })?)
}

/// Saves a node that joined in `lab` on `vm` (Node Ready; on Kind, its kube-proxy synced) into
/// the entry directory `out`: the VM saved and stopped, the control plane stopped and its state
/// copied, the lab torn down.
pub fn save(
    out: &Path,
    mut lab: Lab,
    vm: Vm,
    deployed: DeployedNode,
    join: Duration,
) -> Result<Saved, NodeCheckpointError> {
    // The disk the VM's overlay is backed by: the image's saved state's, or the image's own.
    let base_disk = vm
        .saved_state()
        .map(|dir| dir.join(crate::vm::state::DISK))
        .unwrap_or_else(|| vm.spec().image.disk.clone());
    // The Kind cluster's kube-proxy DaemonSet pod has started on the node and written its
    // rules: a resumed node has them at once (crate::kind::node_proxy).
    let step = crate::progress::Step::start(format!(
        "node {}: waiting for its kube-proxy to sync",
        deployed.name
    ));
    crate::kind::node_proxy::wait_kube_proxy_synced(&vm, vm.deadlines().command * 3)
        .map_err(NodeCheckpointError::KubeProxy)?;
    step.finish();
    let step = crate::progress::Step::start(format!("saving node {} into a checkpoint", deployed.name));
    let save = vm.save_into(out)?;
    step.line(&format!("VM saved in {:.1}s", save.as_secs_f64()));
    lab.stop_control_plane_saving(&out.join(CONTROL_PLANE))?;
    lab.shutdown()?;
    step.finish();
    Ok(Saved {
        deployed,
        base_disk,
        join,
        save,
    })
}

/// A node in a lab of its own: resumed from its checkpoint (or joined there).
pub struct ResumedNode {
    pub lab: Lab,
    pub vm: Vm,
    pub artifacts: LabArtifacts,
    pub deployed: DeployedNode,
    /// For an offline node: what the probe from inside the resumed VM saw.
    pub offline_probe: Option<NoRoute>,
}

/// Resumes `saved` (a checkpoint of `node`): the lab of `lab_spec` with the checkpoint's control
/// plane, the node artifacts published, the VM resumed (with `share` at `/mnt/lab`, or the
/// offline bundle for an offline node, which is cut off from the artifact server again and
/// probed), its connections to the saved cluster's API server closed, then waits until the
/// kubelet renewed its Lease in this cluster and the Node is Ready, and the cluster DNS answers
/// from the lab namespace ([`crate::kind::cluster_dns_probe`]) and from the node.
/// [`NodeCheckpointError::NotLoaded`] when QEMU cannot load the checkpoint.
pub fn resume(
    lab_spec: LabSpec,
    node: &NodeConfig,
    cache: &Cache,
    saved: &Checkpoint,
    share: Option<PathBuf>,
) -> Result<ResumedNode, NodeCheckpointError> {
    let image = crate::images::host::require(cache).map_err(|e| NodeCheckpointError::Host {
        what: "the host image".into(),
        why: Chain(&e).to_string(),
    })?;
    let lab = Lab::start(LabSpec {
        control_plane: true,
        control_plane_state: Some(saved.control_plane()),
        ..lab_spec
    })?;
    let artifacts = crate::artifacts::publish(&lab, cache)?;
    let deployed = saved.info.deployed.clone();
    let nic = lab.attach_vm()?;
    if nic.ip != deployed.node_ip {
        return Err(NodeCheckpointError::Address {
            got: nic.ip,
            want: deployed.node_ip,
        });
    }
    let mut spec = VmSpec::new(lab.name(), node.name(), BootImage::from(&image));
    nic.apply(&mut spec);
    spec.share = share;
    if node.offline {
        offline::cut_off(&lab, nic.ip)?;
        spec.share = Some(artifacts.offline_bundle_dir().to_path_buf());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(NodeCheckpointError::Runtime)?;
    let client = runtime.block_on(lab.cluster().ok_or(NodeCheckpointError::NoControlPlane)?.client())?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let saved_lease = lease_version(&runtime, &leases, &deployed.name)?;
    let vm = Vm::resume_from(spec, &saved.saved_vm()).map_err(|err| match err {
        VmError::State { .. } => NodeCheckpointError::NotLoaded {
            dir: saved.dir.clone(),
            source: Box::new(err),
        },
        other => other.into(),
    })?;
    let timeout = vm.deadlines().command * 2;
    close_connections_to_the_saved_api_server(&vm, &lab)?;
    let step = crate::progress::Step::start(format!(
        "waiting for the resumed kubelet of {} to renew its Lease and the Node to be Ready",
        deployed.name
    ));
    let renewed = crate::wait::wait_until(
        format!("Lease kube-node-lease/{}", deployed.name),
        timeout,
        "the resumed kubelet to renew it",
        || match lease_version(&runtime, &leases, &deployed.name) {
            Ok(now) if now.is_some() && now != saved_lease => Attempt::Ready(()),
            Ok(now) => Attempt::Retry(format!("resourceVersion {now:?}, as in the checkpoint")),
            Err(err) => Attempt::Retry(err.to_string()),
        },
    );
    renewed.map_err(|timed_out: WaitTimeout| NodeCheckpointError::LeaseNotRenewed {
        node: deployed.name.clone(),
        saved: saved_lease.clone(),
        waited: timed_out.waited,
    })?;
    runtime.block_on(wait_node_ready(&client, &deployed.name, timeout))?;
    step.finish();
    // A restored Kind cluster's CoreDNS pods start again with its kubelet; until they answer
    // behind the Service, the node's queries to it fail (SERVFAIL through LocalDNS).
    let cluster_dns = lab
        .cluster()
        .ok_or(NodeCheckpointError::NoControlPlane)?
        .cluster_dns;
    let step = crate::progress::Step::start(format!(
        "waiting for the cluster DNS {cluster_dns} to answer from the lab namespace and the node"
    ));
    crate::kind::cluster_dns_probe::wait_answers_in(&lab.name(), cluster_dns, timeout)
        .map_err(NodeCheckpointError::ClusterDns)?;
    // On Kind the node's own kube-proxy sends its queries on: it must have the restored CoreDNS
    // pod's endpoint, which it lists again once its old connection is gone (above).
    wait_node_reaches_cluster_dns(&vm, cluster_dns, timeout).map_err(NodeCheckpointError::ClusterDns)?;
    step.finish();
    let offline_probe = if node.offline {
        Some(offline::prove_and_hand_over(&lab, &vm, &artifacts)?.1)
    } else {
        None
    };
    Ok(ResumedNode {
        lab,
        vm,
        artifacts,
        deployed,
        offline_probe,
    })
}

/// Closes the resumed VM's TCP connections to the API server (`ss -K`): the saved cluster's
/// server knew them, the restored one does not. Its kubelet and kube-proxy then connect again and
/// list what changed (a restored Kind node's CoreDNS pod has a new address) at once, instead of
/// after their HTTP/2 health checks give up on the silent connection (~30 s).
fn close_connections_to_the_saved_api_server(vm: &Vm, lab: &Lab) -> Result<(), NodeCheckpointError> {
    let cluster = lab.cluster().ok_or(NodeCheckpointError::NoControlPlane)?;
    let endpoint = cluster
        .api_server
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_string();
    let (ip, port) = endpoint
        .rsplit_once(':')
        .ok_or_else(|| NodeCheckpointError::Host {
            what: "the API server's address".into(),
            why: format!("{:?} has no port", cluster.api_server),
        })?;
    vm.run(&format!("ss -K dst {ip} dport = :{port} >/dev/null"))?;
    Ok(())
}

/// Waits until a DNS query over TCP from the VM's host to the cluster DNS is answered: the path
/// the node's LocalDNS forwards on (on Kind, through the node's kube-proxy).
fn wait_node_reaches_cluster_dns(
    vm: &Vm,
    cluster_dns: std::net::Ipv4Addr,
    timeout: Duration,
) -> Result<(), WaitTimeout> {
    let name = crate::kind::cluster_dns_probe::PROBE_NAME;
    let dig = format!("dig +tcp +time=2 +tries=1 +short @{cluster_dns} {name} 2>&1");
    crate::wait::wait_until(
        format!("VM {}", vm.name()),
        timeout,
        format!("an answer for {name} from {cluster_dns} over TCP"),
        || match vm.run_unchecked(&dig) {
            Ok(out) if out.stdout_text().trim().parse::<std::net::Ipv4Addr>().is_ok() => Attempt::Ready(()),
            Ok(out) => Attempt::Retry(format!("dig printed {:?}", out.stdout_text().trim())),
            Err(e) => Attempt::Retry(e.to_string()),
        },
    )
}

/// The `resourceVersion` of the node's Lease (`None` when there is none).
fn lease_version(
    runtime: &tokio::runtime::Runtime,
    leases: &Api<Lease>,
    name: &str,
) -> Result<Option<String>, NodeCheckpointError> {
    Ok(runtime
        .block_on(leases.get_opt(name))
        .map_err(|source| NodeCheckpointError::Kube {
            what: format!("reading Lease kube-node-lease/{name}"),
            source,
        })?
        .and_then(|lease| lease.metadata.resource_version))
}
