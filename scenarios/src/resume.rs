//! A joined node from its checkpoint ([`harness::checkpoint`]): the first test of a node config
//! joins it for real (after [`prepare_host`]) and saves it; every test then resumes it — a
//! lab whose control plane starts from a copy of the saved cluster, the VM resumed on its own
//! overlay — and waits until the node's kubelet renewed its Lease in that cluster and the Node is
//! Ready. `LAB_NO_CHECKPOINT=1` joins for real every time.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, ensure};
use harness::cache::Cache;
use harness::checkpoint::{self, Checkpoint, CheckpointInputs, NodeInputs, Saved};
use harness::deploy::offline;
use harness::lab::{Lab, LabSpec};
use harness::node_config::NodeConfig;
use harness::vm::{BootImage, Vm, VmSpec};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

use crate::dns::ResolvConf;
use crate::node::{ClusterLab, JoinedNode, step};

/// The search line [`prepare_host`] adds to the VM's resolv.conf (a tab on purpose:
/// docs/design.md §3 tolerates them).
pub const HOST_SEARCH: &str = "search\tlab.test";
/// The options line [`prepare_host`] adds.
pub const HOST_OPTIONS: &str = "options ndots:2 timeout:2";
/// What [`prepare_host`] does, for the checkpoint's key (change it with the function).
const PREPARED: &str = "host resolv.conf: search lab.test, options ndots:2 timeout:2";

/// Before the deploy of a checkpointed node: gives the VM's resolver the `search` and
/// `options` lines a real host has (lab-net writes one nameserver line only), so the agent has
/// them to carry into the machine — without them "plus the host's search/options" could not
/// fail.
pub fn prepare_host(lab: &ClusterLab) -> anyhow::Result<()> {
    let before = String::from_utf8(lab.vm.read_file("/etc/resolv.conf")?)?;
    let conf = ResolvConf::parse(&before);
    ensure!(
        conf.nameservers().len() == 1 && conf.directives.len() == 1,
        "the lab VM's /etc/resolv.conf should hold one nameserver line only (lab-net), it holds:\n{before}"
    );
    let text = format!("{}\n{HOST_SEARCH}\n{HOST_OPTIONS}\n", before.trim_end());
    lab.vm.write_file("/etc/resolv.conf", text.as_bytes(), 0o644)?;
    eprintln!("==> the VM's /etc/resolv.conf before deploying:\n{text}");
    Ok(())
}

impl JoinedNode {
    /// A node for `node_config` as [`prepare_host`] and a real join leave it: resumed from its
    /// checkpoint (built first by joining when there is none; other tests wait for that), or
    /// joined for real with `LAB_NO_CHECKPOINT=1` or when QEMU cannot load the checkpoint (which
    /// is then removed).
    pub fn resume_or_join(node_config: &Path) -> anyhow::Result<JoinedNode> {
        if !checkpoint::enabled() {
            eprintln!("==> {}=1: joining for real", checkpoint::NO_CHECKPOINT_ENV);
            return JoinedNode::join_with(node_config, prepare_host);
        }
        let node = NodeConfig::load(node_config)?;
        let cache = Cache::open()?;
        let inputs = checkpoint_inputs(&cache, &node, node_config)?;
        let saved = step(&format!("getting the checkpoint of node {}", node.name()), || {
            Ok(checkpoint::ensure(&cache, &inputs, |out| {
                save_joined(node_config, out)
            })?)
        })?;
        eprintln!(
            "==> node checkpoint {} ({} s old; its join took {:.0} s)",
            saved.dir.display(),
            saved.age().as_secs(),
            saved.info.join_secs
        );
        match JoinedNode::resume(node, &cache, &saved) {
            Ok(joined) => Ok(joined),
            Err(Resumed::NotLoaded(err)) => {
                eprintln!("==> warning: {err:#}; removing the checkpoint and joining for real");
                saved.invalidate(&cache)?;
                JoinedNode::join_with(node_config, prepare_host)
            }
            Err(Resumed::Failed(err)) => Err(err),
        }
    }

    /// The lab with the checkpoint's cluster, the VM resumed, the Lease renewed, Node Ready.
    fn resume(node: NodeConfig, cache: &Cache, saved: &Checkpoint) -> Result<JoinedNode, Resumed> {
        let test = crate::test_name();
        let image = harness::images::host::require(cache).map_err(Resumed::Failed)?;
        let lab = step("starting the lab with the checkpoint's control plane", || {
            Ok(Lab::start(LabSpec {
                control_plane: true,
                control_plane_state: Some(saved.control_plane()),
                ..LabSpec::for_test(&test)
            })?)
        })
        .map_err(Resumed::Failed)?;
        let artifacts = step("publishing the node artifacts", || {
            Ok(harness::artifacts::publish(&lab, cache)?)
        })
        .map_err(Resumed::Failed)?;
        let deployed = saved.info.deployed.clone();
        let nic = lab.attach_vm().map_err(|e| Resumed::Failed(e.into()))?;
        if nic.ip != deployed.node_ip {
            return Err(Resumed::Failed(anyhow::anyhow!(
                "the lab gave the VM {}, the checkpoint's node has {}",
                nic.ip,
                deployed.node_ip
            )));
        }
        let mut spec = VmSpec::new(lab.name(), node.name(), BootImage::from(&image));
        nic.apply(&mut spec);
        if node.offline {
            step(
                &format!("cutting {} off from the artifact server", nic.ip),
                || Ok(offline::cut_off(&lab, nic.ip)?),
            )
            .map_err(Resumed::Failed)?;
            spec.share = Some(artifacts.offline_bundle_dir().to_path_buf());
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting a tokio runtime")
            .map_err(Resumed::Failed)?;
        let cluster = lab
            .cluster()
            .context("the lab has no control plane")
            .map_err(Resumed::Failed)?;
        let client = runtime
            .block_on(cluster.client())
            .map_err(|e| Resumed::Failed(e.into()))?;
        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
        let saved_lease = runtime
            .block_on(leases.get_opt(&deployed.name))
            .context("reading the node's Lease")
            .map_err(Resumed::Failed)?
            .and_then(|l| l.metadata.resource_version);
        let vm = match step(
            &format!("resuming VM {} from the checkpoint", node.name()),
            || Ok(Vm::resume_from(spec, &saved.saved_vm())?),
        ) {
            Ok(vm) => vm,
            Err(err) if is_not_loaded(&err) => return Err(Resumed::NotLoaded(err)),
            Err(err) => return Err(Resumed::Failed(err)),
        };
        let joined = JoinedNode::assemble(
            vm,
            lab,
            node,
            test,
            artifacts,
            deployed,
            client,
            runtime,
            saved.dir.clone(),
        );
        let ready = step(
            "waiting for the resumed kubelet to renew its Lease and the Node to be Ready",
            || joined.wait_lease_renewed(saved_lease.as_deref()),
        );
        let offline_probe = match ready.and_then(|()| joined.prove_offline_again()) {
            Ok(probe) => probe,
            Err(err) => {
                let dir = joined.collect_evidence(&format!("{err:#}"));
                return Err(Resumed::Failed(
                    err.context(format!("evidence in {}", dir.display())),
                ));
            }
        };
        Ok(joined.with_offline_probe(offline_probe))
    }

    /// Waits until the node's Lease has another resourceVersion than `saved` (the kubelet of
    /// the resumed VM renewed it in this cluster), then for the Node to be Ready.
    fn wait_lease_renewed(&self, saved: Option<&str>) -> anyhow::Result<()> {
        let name = self.deployed.name.clone();
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), "kube-node-lease");
        let deadline = Instant::now() + self.deadline(2);
        loop {
            let now = self
                .block_on(leases.get_opt(&name))
                .context("reading the node's Lease")?
                .and_then(|l| l.metadata.resource_version);
            if now.is_some() && now.as_deref() != saved {
                break;
            }
            ensure!(
                Instant::now() < deadline,
                "the kubelet of {name} did not renew its Lease (kube-node-lease/{name}, resourceVersion {saved:?}) within {:?} of the resume",
                self.deadline(2)
            );
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
        self.block_on(crate::cluster::wait_node_ready(
            &self.client,
            &name,
            self.deadline(2),
        ))?;
        Ok(())
    }

    /// For an offline node: proves again from inside the resumed VM that it has no route to
    /// the artifact server and sees the bundle (what [`JoinedNode::ensure_stayed_offline`]
    /// compares with at the end). `None` for an online node.
    fn prove_offline_again(&self) -> anyhow::Result<Option<offline::NoRoute>> {
        if !self.node.offline {
            return Ok(None);
        }
        let (_, seen) = offline::prove_and_hand_over(&self.lab, &self.vm, &self.artifacts)?;
        Ok(Some(seen))
    }
}

/// How resuming failed.
enum Resumed {
    /// QEMU could not load the checkpoint: it is unusable.
    NotLoaded(anyhow::Error),
    Failed(anyhow::Error),
}

fn is_not_loaded(err: &anyhow::Error) -> bool {
    matches!(
        err.downcast_ref::<harness::vm::VmError>(),
        Some(harness::vm::VmError::State { .. })
    )
}

/// What the checkpoint of `node` depends on now.
fn checkpoint_inputs(
    cache: &Cache,
    node: &NodeConfig,
    node_config: &Path,
) -> anyhow::Result<CheckpointInputs> {
    let image = harness::images::host::require(cache)?;
    let probe = VmSpec::new("checkpoint", node.name(), BootImage::from(&image));
    let accel = harness::vm::Accel::from_env()?;
    let vm_state_key = harness::vm::state::StateInputs::for_spec(&probe, accel)?
        .key()
        .hex();
    let agent = harness::deploy::plan::host_agent_binary(&harness::deploy::plan::target_dir());
    Ok(CheckpointInputs::new(&NodeInputs {
        vm_state_key: &vm_state_key,
        agent_binary: &agent,
        node_config,
        artifacts_key: &harness::artifacts::published_key(cache)?,
        crd_dir: &harness::lab::cluster::crd_dir(),
        prepare: PREPARED,
    })?)
}

/// Builds a checkpoint into `out`: joins the node for real (after [`prepare_host`]), waits
/// for Node Ready, saves the VM, stops the control plane and copies its state.
fn save_joined(node_config: &Path, out: &Path) -> anyhow::Result<Saved> {
    let started = Instant::now();
    let joined = JoinedNode::join_with(node_config, prepare_host)?;
    let name = joined.deployed.name.clone();
    joined.block_on(crate::cluster::wait_node_ready(
        &joined.client,
        &name,
        joined.deadline(5),
    ))?;
    let join = started.elapsed();
    let (vm, mut lab, deployed) = joined.into_parts();
    let base_disk = vm
        .saved_state()
        .map(|dir| dir.join(harness::vm::state::DISK))
        .unwrap_or_else(|| vm.spec().image.disk.clone());
    let save = step(&format!("saving VM {} into the checkpoint", vm.name()), || {
        Ok(vm.save_into(out)?)
    })?;
    step("saving the control plane's state into the checkpoint", || {
        let state = lab.stop_control_plane()?;
        checkpoint::copy_tree(&state, &out.join(checkpoint::CONTROL_PLANE))
            .with_context(|| format!("copying {}", state.display()))?;
        Ok(())
    })?;
    lab.shutdown()?;
    Ok(Saved {
        deployed,
        base_disk,
        join,
        save,
    })
}
