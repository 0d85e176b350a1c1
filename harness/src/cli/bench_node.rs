//! `harness bench node`: boots a lab with its control plane and one VM, joins the node and
//! prints the time from `start` to LocalDNS ready and to Node Ready, and the memory at steady
//! state (figures in docs/perf.md).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::deploy::{join, measure};
use crate::lab::{Lab, LabSpec};
use crate::node_config::NodeConfig;
use crate::vm::BootImage;
use anyhow::Context;

/// Evidence and lab logs go under `$LAB_ARTIFACTS_DIR/bench-node/`.
const NAME: &str = "bench-node";

#[derive(clap::Args)]
pub struct Args {
    /// The node config to join with.
    #[arg(default_value = "node-configs/localdns.json")]
    node_config: PathBuf,
    /// Seconds to let the node settle after it is Ready before reading memory.
    #[arg(long, default_value_t = 60)]
    settle: u64,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let node = NodeConfig::load(&args.node_config)?;
    let cache = crate::cache::Cache::open()?;
    let image = crate::images::host::require(&cache)?;
    let started = Instant::now();
    let lab = Lab::start(LabSpec {
        control_plane: true,
        ..LabSpec::for_test(NAME)
    })?;
    eprintln!(
        "==> lab {} with its control plane up in {:.1}s",
        lab.name(),
        started.elapsed().as_secs_f64()
    );
    let booted = Instant::now();
    let vm = lab.add_vm(node.name(), BootImage::from(&image))?;
    eprintln!(
        "==> VM {} booted in {:.1}s ({})",
        vm.name(),
        booted.elapsed().as_secs_f64(),
        vm.accel()
    );
    let joined = join::join(&lab, &vm, &node, &cache, NAME)?;
    eprintln!("==> settling for {} s ...", args.settle);
    std::thread::sleep(Duration::from_secs(args.settle));
    let figures = measure::measure(&vm, &joined, "kube1").context("measuring the node")?;
    println!(
        "Node {} ({}), VM {} MiB / {} vCPUs under {}, {}:\n\n| what | figure |\n|---|---|\n{}",
        joined.deployed.name,
        args.node_config.display(),
        vm.spec().memory_mib,
        vm.spec().cpus,
        vm.accel(),
        lab.name(),
        figures.table()
    );
    vm.shutdown()?;
    lab.shutdown()?;
    Ok(ExitCode::SUCCESS)
}
