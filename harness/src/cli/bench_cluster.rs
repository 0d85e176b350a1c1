//! `harness bench cluster`: a lab's Kind cluster made cold and warm, side by side in one run —
//! cold: the node image removed from the container engine first, so the run imports it (what a
//! fresh machine or a new node image costs); warm: the image already in the engine (every later
//! lab). Each run times the lab up to its cluster answering (Kind's create, the wiring to the
//! lab's bridge, the lab's objects, CoreDNS answering with the lab's Corefile) and its teardown,
//! and prints the figures and the cold/warm ratio (docs/perf.md).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::kind::Engine;
use crate::lab::{Lab, LabSpec};

/// Evidence and lab logs go under `$LAB_ARTIFACTS_DIR/bench-cluster/`.
const NAME: &str = "bench-cluster";

#[derive(clap::Args)]
pub struct Args {
    /// Warm runs after the cold one.
    #[arg(long, default_value_t = 2)]
    warm: u32,
    /// Skip the cold run (the node image stays in the engine).
    #[arg(long)]
    no_cold: bool,
}

/// One lab made and torn down.
struct Run {
    what: &'static str,
    import: Option<Duration>,
    up: Duration,
    down: Duration,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let cache = crate::cache::Cache::open()?;
    let image = crate::images::kind_node::require(&cache)?;
    let conf = tempfile::tempdir().context("a directory for the engine's configuration")?;
    let engine = Engine::detect(conf.path())?;
    eprintln!("==> {}; node image {}", engine.describe(), image.reference);
    let mut runs = Vec::new();
    if !args.no_cold {
        remove_node_image(&engine, &image.reference)?;
        let started = Instant::now();
        crate::kind::cluster::load_image(&engine, &image)?;
        let import = started.elapsed();
        runs.push(Run {
            import: Some(import),
            ..lab_up_and_down("cold")?
        });
    }
    for _ in 0..args.warm {
        runs.push(lab_up_and_down("warm")?);
    }
    println!("{}", table(&runs));
    Ok(ExitCode::SUCCESS)
}

/// Removes the node image from the engine; refused (naming why) when a container still uses it.
fn remove_node_image(engine: &Engine, reference: &str) -> anyhow::Result<()> {
    let present = agent::exec::run(engine.command().args(["image", "inspect", reference])).is_ok();
    if present {
        agent::exec::run(engine.command().args(["rmi", reference])).with_context(|| {
            format!(
                "removing {reference} for the cold run (a lab still running uses it? `--no-cold` keeps it)"
            )
        })?;
    }
    Ok(())
}

/// A lab with its Kind cluster up, then torn down; both timed.
fn lab_up_and_down(what: &'static str) -> anyhow::Result<Run> {
    let started = Instant::now();
    let lab = Lab::start(LabSpec {
        control_plane: true,
        ..LabSpec::for_test(NAME)
    })?;
    let up = started.elapsed();
    eprintln!(
        "==> {what}: lab {} with its Kind cluster up in {:.1}s",
        lab.name(),
        up.as_secs_f64()
    );
    let started = Instant::now();
    lab.shutdown()?;
    let down = started.elapsed();
    Ok(Run {
        what,
        import: None,
        up,
        down,
    })
}

fn table(runs: &[Run]) -> String {
    let secs = |d: Duration| format!("{:.1} s", d.as_secs_f64());
    let mut out = String::from(
        "| run | node image import | lab with its cluster answering | teardown | total to a cluster |\n|---|---|---|---|---|\n",
    );
    for run in runs {
        let total = run.import.unwrap_or_default() + run.up;
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            run.what,
            run.import.map(secs).unwrap_or_else(|| "(in the engine)".into()),
            secs(run.up),
            secs(run.down),
            secs(total)
        ));
    }
    let total = |r: &Run| (r.import.unwrap_or_default() + r.up).as_secs_f64();
    let warm: Vec<f64> = runs.iter().filter(|r| r.what == "warm").map(total).collect();
    if let (Some(cold), false) = (runs.iter().find(|r| r.what == "cold"), warm.is_empty()) {
        let mean = warm.iter().sum::<f64>() / warm.len() as f64;
        out.push_str(&format!(
            "\ncold/warm: {:.2} ({:.1} s / {:.1} s, the mean of {} warm runs)\n",
            total(cold) / mean,
            total(cold),
            mean,
            warm.len()
        ));
    }
    out
}
