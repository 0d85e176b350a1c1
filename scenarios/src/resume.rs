//! A joined node from its checkpoint ([`harness::checkpoint`]): the first test of a node config
//! (the `bootstrap` scenario's, which CI runs first) joins it for real (after
//! [`prepare_host`](harness::checkpoint::node::prepare_host), listing the host before the deploy
//! into the checkpoint's [`HOST_LISTING`]) and saves it; every test then resumes it in a lab of
//! its own ([`harness::checkpoint::node::resume`]). `LAB_NO_CHECKPOINT=1` joins for real every
//! time.

use std::cell::Cell;
use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use harness::cache::Cache;
use harness::checkpoint::node::{self as saved_node, NodeCheckpointError};
use harness::checkpoint::{self, Checkpoint, HOST_LISTING, Saved};
use harness::lab::LabSpec;
use harness::node_config::NodeConfig;

use crate::host_listing::HostListing;
use crate::node::{ClusterLab, JoinedNode, step};

/// [`saved_node::prepare_host`] on a booted lab's VM, as a `before_deploy` of a real join.
pub fn prepare_host(lab: &ClusterLab) -> anyhow::Result<()> {
    Ok(saved_node::prepare_host(&lab.vm)?)
}

impl JoinedNode {
    /// A node for `node_config` as [`prepare_host`] and a real join leave it: resumed from its
    /// checkpoint (built first by joining when there is none; other tests wait for that), or
    /// joined for real with `LAB_NO_CHECKPOINT=1` or when QEMU cannot load the checkpoint (which
    /// is then removed).
    pub fn resume_or_join(node_config: &Path) -> anyhow::Result<JoinedNode> {
        JoinedNode::resume_or_join_with(node_config, prepare_host)
    }

    /// [`JoinedNode::resume_or_join`] whose real join (when there is no usable checkpoint) runs
    /// `before_deploy` on the booted lab, which must leave the VM as [`prepare_host`] does.
    pub fn resume_or_join_with(
        node_config: &Path,
        before_deploy: impl FnOnce(&ClusterLab) -> anyhow::Result<()>,
    ) -> anyhow::Result<JoinedNode> {
        let _getting_node = harness::phase_clock::enter(harness::phase_clock::Phase::GettingNode);
        if !checkpoint::enabled() {
            eprintln!("==> {}=1: joining for real", checkpoint::NO_CHECKPOINT_ENV);
            return JoinedNode::join_with(node_config, before_deploy);
        }
        let cache = Cache::open()?;
        let saved = ensure_checkpoint(&cache, node_config)?;
        JoinedNode::resume_from(&cache, node_config, saved, before_deploy)
    }

    /// The `bootstrap` scenario's node, always a real join (after [`prepare_host`]). When its
    /// node config has LocalDNS on (the configs other scenarios resume) and no checkpoint yet,
    /// that join builds it and the node is resumed from it, so no other test joins the config
    /// again; with a checkpoint (or `LAB_NO_CHECKPOINT=1`) it
    /// joins for real beside it. Should another test build the checkpoint first (this one waited
    /// for it), it joins for real all the same.
    pub fn join_for_real(node_config: &Path) -> anyhow::Result<JoinedNode> {
        let _getting_node = harness::phase_clock::enter(harness::phase_clock::Phase::GettingNode);
        if !checkpoint::enabled() {
            return JoinedNode::join_with(node_config, prepare_host);
        }
        let node = NodeConfig::load(node_config)?;
        let cache = Cache::open()?;
        let inputs = saved_node::inputs(&cache, &node, node_config)?;
        // Only the configs other scenarios resume (those with LocalDNS: resumed_node, the
        // lifecycle cases); another's checkpoint would be saved for nobody.
        if node.local_dns && checkpoint::find(&cache, &inputs).is_none() {
            let built = Cell::new(false);
            let saved = build_checkpoint(&cache, node_config, &inputs, || built.set(true))?;
            if built.get() {
                eprintln!("==> this test's real join built the checkpoint; resuming the node from it");
                return JoinedNode::resume_from(&cache, node_config, saved, prepare_host);
            }
        }
        JoinedNode::join_with(node_config, prepare_host)
    }

    /// The node resumed from `saved` into a lab of this test's own, or joined for real (after
    /// `before_deploy`) when QEMU cannot load the checkpoint (which is then removed).
    fn resume_from(
        cache: &Cache,
        node_config: &Path,
        saved: Checkpoint,
        before_deploy: impl FnOnce(&ClusterLab) -> anyhow::Result<()>,
    ) -> anyhow::Result<JoinedNode> {
        let node = NodeConfig::load(node_config)?;
        let test = crate::test_name();
        let resumed = step(
            &format!("resuming node {} from its checkpoint", node.name()),
            || {
                Ok(saved_node::resume(
                    LabSpec::for_test(&test),
                    &node,
                    cache,
                    &saved,
                    None,
                )?)
            },
        );
        match resumed {
            Ok(resumed) => JoinedNode::from_parts(resumed, node, test, Some(saved.dir.clone())),
            Err(err)
                if matches!(
                    err.downcast_ref::<NodeCheckpointError>(),
                    Some(NodeCheckpointError::NotLoaded { .. })
                ) =>
            {
                eprintln!("==> warning: {err:#}; removing the checkpoint and joining for real");
                saved.invalidate(cache)?;
                JoinedNode::join_with(node_config, before_deploy)
            }
            Err(err) => Err(err),
        }
    }
}

/// The checkpoint of the node of `node_config` as things are now: found, or built by joining the
/// node for real (other processes wanting it wait for that build).
pub fn ensure_checkpoint(cache: &Cache, node_config: &Path) -> anyhow::Result<Checkpoint> {
    let node = NodeConfig::load(node_config)?;
    let inputs = saved_node::inputs(cache, &node, node_config)?;
    build_checkpoint(cache, node_config, &inputs, || ())
}

/// [`checkpoint::ensure`] for `inputs`, building by [`save_joined`]; `on_build` is called when
/// this process is the one that joins (not when it found the checkpoint or waited for another's).
fn build_checkpoint(
    cache: &Cache,
    node_config: &Path,
    inputs: &checkpoint::CheckpointInputs,
    on_build: impl Fn(),
) -> anyhow::Result<Checkpoint> {
    let node = NodeConfig::load(node_config)?;
    let saved = step(&format!("getting the checkpoint of node {}", node.name()), || {
        Ok(checkpoint::ensure(cache, inputs, |out| {
            on_build();
            save_joined(node_config, out).map_err(Into::into)
        })?)
    })?;
    eprintln!(
        "==> node checkpoint {} ({} s old; its join took {:.0} s)",
        saved.dir.display(),
        saved.age().as_secs(),
        saved.info.join_secs
    );
    Ok(saved)
}

/// Builds a checkpoint into `out`: joins the node for real (after [`prepare_host`], then the
/// host's listing into [`HOST_LISTING`]), waits for Node Ready, and saves it
/// ([`saved_node::save`]).
fn save_joined(node_config: &Path, out: &Path) -> anyhow::Result<Saved> {
    let started = Instant::now();
    let joined = JoinedNode::join_with(node_config, |lab| {
        prepare_host(lab)?;
        HostListing::take(&lab.vm)?.save(&out.join(HOST_LISTING))
    })?;
    let name = joined.deployed.name.clone();
    joined
        .block_on(crate::cluster::wait_node_ready(
            &joined.client,
            &name,
            joined.deadline(5),
        ))
        .with_context(|| format!("waiting for Node {name} to be Ready before saving it"))?;
    let join = started.elapsed();
    let (vm, lab, deployed) = joined.into_parts();
    Ok(saved_node::save(out, lab, vm, deployed, join)?)
}
