//! Shared plumbing of the end-to-end scenarios: the node configs each case
//! runs over, a lab with one VM booted for a node config ([`LabNode`]), and a
//! node joined to the lab's cluster ([`node::JoinedNode`], with pods and their
//! logs through the API server in [`cluster`]).
//!
//! A scenario is a nextest test in `scenarios/tests/`, parameterised over
//! `node-configs/*.json` with rstest's
//! `#[files("*.json")] #[base_dir = "../node-configs"]`, so every node config is
//! its own test case (`<scenario>::node_config_<i>_<name>_json`). `.config/nextest.toml` puts the
//! whole crate in the `vm` test group (two VMs at once). When a case panics
//! or returns an error ([`LabNode::run_case`]), the VM's evidence is saved
//! under `$LAB_ARTIFACTS_DIR/<test>/` (see
//! `harness::evidence`), the lab's DNS and HTTP logs under `.../<test>/lab/`.

pub mod cluster;
pub mod dns;
pub mod host_state;
pub mod lifecycle;
pub mod metrics;
pub mod node;
pub mod pod_dns;
pub mod resume;

use std::path::{Path, PathBuf};

use anyhow::Context;
use harness::lab::{Lab, LabSpec};
use harness::node_config::NodeConfig;
use harness::vm::{BootImage, Vm};

/// The node configs every scenario runs over, sorted.
pub fn node_config_paths() -> anyhow::Result<Vec<PathBuf>> {
    let dir = harness::evidence::repo_root().join("node-configs");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    Ok(paths)
}

/// The running test's name, for its evidence directory.
pub fn test_name() -> String {
    harness::evidence::current_test_name()
}

/// A lab with one VM booted for a node config. Fields drop in order: the VM
/// (collecting evidence if the test panicked), then the lab.
pub struct LabNode {
    pub vm: Vm,
    pub lab: Lab,
    pub node: NodeConfig,
    pub test: String,
}

impl LabNode {
    /// Starts a lab for the running test and boots a VM named after the node
    /// config from the cached host image (fails at once naming
    /// `harness images build` when it is missing).
    pub fn boot(node_config: &Path) -> anyhow::Result<LabNode> {
        let test = test_name();
        let node = NodeConfig::load(node_config)?;
        let cache = harness::cache::Cache::open()?;
        let image = harness::images::host::require(&cache)?;
        let lab = Lab::start(LabSpec::for_test(&test))?;
        let vm = lab
            .add_vm(node.name(), BootImage::from(&image))
            .with_context(|| format!("booting VM {} in {}", node.name(), lab.name()))?;
        Ok(LabNode { vm, lab, node, test })
    }

    /// Boots a lab node for `node_config`, runs `case` on it and shuts it down.
    /// When the case fails with an error (a panic is covered by the VM's own
    /// guard), the VM's evidence is saved first and the path printed.
    pub fn run_case(
        node_config: &Path,
        case: impl FnOnce(&mut LabNode) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let mut node = LabNode::boot(node_config)?;
        if let Err(err) = case(&mut node) {
            let dir = harness::evidence::collect(&node.vm, &node.test, &format!("{err:#}"));
            let err = err.context(format!("evidence in {}", dir.display()));
            return Err(node::keep_if_asked(&node.lab, &node.vm, &node.test, err));
        }
        node.shutdown()
    }

    /// Stops the VM, then the lab, and checks that nothing of either is left.
    pub fn shutdown(self) -> anyhow::Result<()> {
        let LabNode { vm, lab, .. } = self;
        vm.shutdown()?;
        lab.shutdown()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_configs_are_found_and_each_loads_with_a_vm_name() {
        let paths = node_config_paths().unwrap();
        assert!(!paths.is_empty(), "no node-configs/*.json");
        for path in paths {
            let node = NodeConfig::load(&path).unwrap();
            assert!(!node.name().is_empty(), "{}", path.display());
        }
    }
}
