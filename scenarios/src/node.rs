//! [`JoinedNode`]: a lab with its control plane, the node artifacts published, one VM booted
//! for a node config and the agent deployed and started on it — the start of every scenario
//! about a node in the cluster.
//!
//! An offline node config (`"offline": true`) changes this transparently: its VM boots from a
//! fresh overlay as always, with the offline bundle as its 9p share (read-only at `/mnt/lab`,
//! the agent's `OfflineArtifacts.Source`) and no route to the artifact server from before its
//! first boot ([`harness::deploy::offline`]); [`JoinedNode::join`] proves the block from inside
//! the VM, and [`JoinedNode::run_case`] checks after the case that the artifact server logged no
//! request, then (positive control) that it logs the VM's request once the route is back.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use harness::artifacts::LabArtifacts;
use harness::controlplane::ClusterAccess;
use harness::deploy::DeployedNode;
use harness::deploy::offline;
use harness::lab::{Lab, LabSpec, VmNic};
use harness::node_config::NodeConfig;
use harness::vm::{BootImage, Vm, VmSpec};

/// A node that joined (its `start` finished) with what a scenario needs to check it. Fields drop
/// in order: the VM (collecting evidence if the test panicked), then the lab.
pub struct JoinedNode {
    pub vm: Vm,
    pub lab: Lab,
    pub node: NodeConfig,
    pub test: String,
    pub artifacts: LabArtifacts,
    pub deployed: DeployedNode,
    pub client: kube::Client,
    runtime: tokio::runtime::Runtime,
    /// For an offline node: what the probe of the artifact server saw before the deploy.
    offline_probe: Option<offline::NoRoute>,
    /// The checkpoint the node was resumed from (`None`: it joined here).
    pub checkpoint: Option<PathBuf>,
}

/// Prints where the test's time went so far (`harness bench suite` reads the line back from
/// nextest's JUnit report): getting the node, waiting for states, checking.
pub(crate) fn print_phases() {
    eprintln!("{}", harness::phase_clock::report_line());
}

/// Prints a step's time (scenarios are long; the output shows where the time goes).
pub(crate) fn step<T>(what: &str, f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
    let started = Instant::now();
    eprintln!("==> {what} ...");
    let value = f().with_context(|| what.to_string())?;
    eprintln!("==> {what}: done in {:.1}s", started.elapsed().as_secs_f64());
    Ok(value)
}

/// A lab with its control plane, the node artifacts published and one VM booted for a node
/// config, before anything is deployed. Fields drop in order: the VM, then the lab.
pub struct ClusterLab {
    pub vm: Vm,
    pub lab: Lab,
    pub node: NodeConfig,
    pub test: String,
    pub artifacts: LabArtifacts,
}

impl ClusterLab {
    /// Lab with control plane → artifacts published → VM named after the node booted.
    pub fn boot(node: NodeConfig) -> anyhow::Result<ClusterLab> {
        let _getting_node = harness::phase_clock::enter(harness::phase_clock::Phase::GettingNode);
        let test = crate::test_name();
        let cache = harness::cache::Cache::open()?;
        let image = harness::images::host::require(&cache)?;
        let lab = step("starting the lab with its Kind cluster", || {
            Ok(Lab::start(LabSpec {
                control_plane: true,
                ..LabSpec::for_test(&test)
            })?)
        })?;
        let artifacts = step("publishing the node artifacts", || {
            Ok(harness::artifacts::publish(&lab, &cache)?)
        })?;
        let nic = lab.attach_vm()?;
        let mut spec = VmSpec::new(lab.name(), node.name(), BootImage::from(&image));
        nic.apply(&mut spec);
        if node.offline {
            step(
                &format!("cutting {} off from the artifact server", nic.ip),
                || Ok(offline::cut_off(&lab, nic.ip)?),
            )?;
            spec.share = Some(artifacts.offline_bundle_dir().to_path_buf());
        }
        let vm = step(&format!("booting VM {}", node.name()), || Ok(Vm::boot(spec)?))?;
        Ok(ClusterLab {
            vm,
            lab,
            node,
            test,
            artifacts,
        })
    }

    /// Deploys the node config onto the VM (`harness::deploy::deploy_node`).
    pub fn deploy(&self) -> Result<DeployedNode, harness::deploy::DeployError> {
        harness::deploy::deploy_node_as(&self.lab, &self.vm, &self.node, &self.artifacts, &self.test)
    }

    /// Stops the VM, then the lab, and checks that nothing of either is left.
    pub fn shutdown(self) -> anyhow::Result<()> {
        print_phases();
        self.vm.shutdown()?;
        self.lab.shutdown()?;
        Ok(())
    }
}

impl JoinedNode {
    /// Lab with control plane → artifacts published → VM booted → agent deployed and `start`
    /// run. Each step's failure names the step; a deploy failure carries its evidence path.
    pub fn join(node_config: &Path) -> anyhow::Result<JoinedNode> {
        JoinedNode::join_with(node_config, |_| Ok(()))
    }

    /// [`JoinedNode::join`] that runs `before_deploy` on the booted lab (VM up, nothing
    /// deployed yet), e.g. to change the VM's resolv.conf the agent reads.
    pub fn join_with(
        node_config: &Path,
        before_deploy: impl FnOnce(&ClusterLab) -> anyhow::Result<()>,
    ) -> anyhow::Result<JoinedNode> {
        let _getting_node = harness::phase_clock::enter(harness::phase_clock::Phase::GettingNode);
        let node = NodeConfig::load(node_config)?;
        let booted = ClusterLab::boot(node)?;
        step("preparing the VM before deploying", || before_deploy(&booted))?;
        let ClusterLab {
            vm,
            lab,
            node,
            test,
            artifacts,
        } = booted;
        let offline_probe = if node.offline {
            let what = "proving the VM has no route to the artifact server and sees the bundle";
            match step(what, || Ok(offline::prove_and_hand_over(&lab, &vm, &artifacts)?)) {
                Ok((_, seen)) => Some(seen),
                Err(err) => return Err(keep_if_asked(&lab, &vm, &test, err)),
            }
        } else {
            None
        };
        let deployed = step(&format!("deploying the agent to {}", node.name()), || {
            Ok(harness::deploy::deploy_node_as(
                &lab, &vm, &node, &artifacts, &test,
            )?)
        });
        let deployed = match deployed {
            Ok(deployed) => deployed,
            Err(err) => return Err(keep_if_asked(&lab, &vm, &test, err)),
        };
        let parts = harness::checkpoint::node::ResumedNode {
            lab,
            vm,
            artifacts,
            deployed,
            offline_probe,
        };
        JoinedNode::from_parts(parts, node, test, None)
    }

    /// A joined node from its lab, VM and deployment (`checkpoint`: the directory it was resumed
    /// from, `None` when it joined here), with a client of its cluster.
    pub(crate) fn from_parts(
        resumed: harness::checkpoint::node::ResumedNode,
        node: NodeConfig,
        test: String,
        checkpoint: Option<PathBuf>,
    ) -> anyhow::Result<JoinedNode> {
        let harness::checkpoint::node::ResumedNode {
            lab,
            vm,
            artifacts,
            deployed,
            offline_probe,
        } = resumed;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting a tokio runtime")?;
        let cluster = lab.cluster().context("the lab has no control plane")?.clone();
        let client = runtime.block_on(cluster.client())?;
        Ok(JoinedNode {
            vm,
            lab,
            node,
            test,
            artifacts,
            deployed,
            client,
            runtime,
            offline_probe,
            checkpoint,
        })
    }

    /// The VM, the lab and the deployed node, the client and its runtime dropped (to save the
    /// node into a checkpoint).
    pub(crate) fn into_parts(self) -> (Vm, Lab, DeployedNode) {
        let JoinedNode {
            vm,
            lab,
            deployed,
            client,
            runtime,
            ..
        } = self;
        drop(client);
        drop(runtime);
        (vm, lab, deployed)
    }

    /// Gets a joined node for `node_config` — resumed from its checkpoint
    /// ([`JoinedNode::resume_or_join`]: the node as [`prepare_host`] and a real join left it) —
    /// runs `case` on it and shuts everything down. When the case fails, the node's evidence (VM,
    /// machine, kubelet, cluster objects and control plane logs) is saved under
    /// `$LAB_ARTIFACTS_DIR/<test>/` and its path printed.
    pub fn run_case(
        node_config: &Path,
        case: impl FnOnce(&mut JoinedNode) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let node = JoinedNode::resume_or_join(node_config)?;
        node.run(case)
    }

    /// [`JoinedNode::run_case`] on a node that always joins for real, its join building the
    /// node config's checkpoint when there is none ([`JoinedNode::join_for_real`]; the
    /// `bootstrap` scenario).
    pub fn run_case_joining(
        node_config: &Path,
        case: impl FnOnce(&mut JoinedNode) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        JoinedNode::join_for_real(node_config)?.run(case)
    }

    /// Runs `case`, then the offline check; on failure saves the evidence (and keeps the lab
    /// with `LAB_KEEP=1`); shuts down.
    pub fn run(mut self, case: impl FnOnce(&mut JoinedNode) -> anyhow::Result<()>) -> anyhow::Result<()> {
        let node = &mut self;
        if let Err(err) = case(node).and_then(|()| node.ensure_stayed_offline()) {
            print_phases();
            let dir = node.collect_evidence(&format!("{err:#}"));
            let err = err.context(format!("evidence in {}", dir.display()));
            return Err(keep_if_asked(&node.lab, &node.vm, &node.test, err));
        }
        self.shutdown()
    }

    /// For an offline node: the artifact server logged no request at all (quoting any it did);
    /// then, as the positive control, the VM gets its route back and its one request shows in
    /// the log. Nothing for an online node.
    pub fn ensure_stayed_offline(&self) -> anyhow::Result<()> {
        let Some(probe) = &self.offline_probe else {
            return Ok(());
        };
        offline::ensure_no_requests(&self.lab, probe.rejected_after_probe)?;
        eprintln!(
            "==> offline: the artifact server logged no request and its reject rule counted no \
             attempt beyond the probe ({} packet(s))",
            probe.rejected_after_probe
        );
        let nic = self.nic()?;
        offline::control_after_unblock(&self.lab, &self.vm, nic.ip)?;
        eprintln!(
            "==> positive control: with its route back, the request of {} shows in the artifact server's log",
            nic.ip
        );
        Ok(())
    }

    /// The VM's place in the lab (tap, address).
    pub fn nic(&self) -> anyhow::Result<VmNic> {
        Ok(harness::deploy::lab_values::nic_of(&self.lab, &self.vm)?)
    }

    /// The cluster of the lab.
    pub fn cluster(&self) -> &ClusterAccess {
        self.lab
            .cluster()
            .expect("a joined node's lab has a control plane")
    }

    /// Runs a future (kube calls) to completion.
    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    /// A deadline scaled for the VM's accelerator: `n` times its command deadline
    /// (30 s under KVM, 120 s under TCG).
    pub fn deadline(&self, n: u32) -> Duration {
        self.vm.deadlines().command * n
    }

    /// The one machine running on the node (`kube1` after a first install).
    pub fn machine(&self) -> anyhow::Result<String> {
        let list = self.vm.run("machinectl list --no-legend")?;
        let names: Vec<&str> = list.lines().filter_map(|l| l.split_whitespace().next()).collect();
        match names.as_slice() {
            [one] => Ok(one.to_string()),
            _ => anyhow::bail!("expected one running machine, `machinectl list` shows {names:?}"),
        }
    }

    /// `systemctl --machine=<m> <args>` on the node, whatever its exit status: (status code, stdout).
    pub fn machine_systemctl(&self, machine: &str, args: &str) -> anyhow::Result<(Option<i64>, String)> {
        let out = self
            .vm
            .run_unchecked(&format!("systemctl --machine={machine} {args}"))?;
        let code = match out.status {
            harness::vm::ExitKind::Code(c) => Some(c),
            _ => None,
        };
        Ok((code, out.stdout_text()))
    }

    /// Saves the node's evidence under `$LAB_ARTIFACTS_DIR/<test>/` with the collector of
    /// `harness lab logs` (each VM's journals, ruleset, `start`'s output, the machine's journals,
    /// the cluster's Nodes, Pods and Events, the control plane's logs, `index.txt`) and returns
    /// the directory.
    pub fn collect_evidence(&self, reason: &str) -> PathBuf {
        self.collect_evidence_in(harness::vm::evidence::test_dir(&self.test), reason)
    }

    /// [`JoinedNode::collect_evidence`] under `$LAB_ARTIFACTS_DIR/<test>/<part>/`: the evidence
    /// of one of several checks on the node ([`crate::checks`]).
    pub fn collect_evidence_under(&self, part: &str, reason: &str) -> PathBuf {
        self.collect_evidence_in(harness::vm::evidence::test_dir(&self.test).join(part), reason)
    }

    fn collect_evidence_in(&self, dir: PathBuf, reason: &str) -> PathBuf {
        if let Err(err) =
            std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(dir.join("reason.txt"), reason))
        {
            eprintln!("error: writing {}: {err}", dir.join("reason.txt").display());
        }
        match self.collect_logs(&dir) {
            Ok(dir) => eprintln!(
                "==> evidence of {} ({reason}) saved in {} (index.txt)\n--- last console lines of {} ---\n{}",
                self.test,
                dir.display(),
                self.vm.name(),
                harness::vm::console::tail_block(&self.vm.run_dir().console(), 30)
            ),
            Err(err) => eprintln!("error: collecting the evidence into {}: {err:#}", dir.display()),
        }
        dir
    }

    /// `harness lab logs` of this node's lab into `dir`; returns the directory (its `index.txt`
    /// says what each file is).
    pub fn collect_logs(&self, dir: &Path) -> anyhow::Result<PathBuf> {
        let view = harness::inspect::LabView::open(self.lab.number())?;
        Ok(harness::inspect::logs::collect(&view, dir)?)
    }

    /// `harness lab status` of this node's lab.
    pub fn status(&self) -> anyhow::Result<harness::inspect::status::LabStatus> {
        let view = harness::inspect::LabView::open(self.lab.number())?;
        Ok(harness::inspect::status::collect(&view))
    }

    /// Stops the VM, then the lab, and checks that nothing of either is left.
    pub fn shutdown(self) -> anyhow::Result<()> {
        print_phases();
        let JoinedNode {
            vm,
            lab,
            runtime,
            client,
            ..
        } = self;
        drop(client);
        drop(runtime);
        vm.shutdown()?;
        lab.shutdown()?;
        Ok(())
    }
}

/// With `LAB_KEEP=1`, holds the failed test's lab and VM for a look until
/// `harness lab down --lab N` or Ctrl-C ([`harness::lab::keep`]); then the error goes on.
pub(crate) fn keep_if_asked(lab: &Lab, vm: &Vm, test: &str, err: anyhow::Error) -> anyhow::Error {
    if harness::lab::keep::keep_on_failure() {
        let evidence = harness::vm::evidence::test_dir(test);
        harness::lab::keep::hold(lab, &[vm.name()], &format!("{err:#}"), &evidence);
    }
    err
}
