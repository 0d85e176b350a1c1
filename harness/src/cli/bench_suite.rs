//! `harness bench suite`: where a test run's time went, from nextest's JUnit report — the run's
//! span, the `vm` group's lanes busy and idle, the lone tail, and each VM test longest first with
//! its time split into getting a node, waiting and checking (`harness::phase_clock`); "rest" is
//! what the test spent outside those: its process starting and the lab's teardown.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::suite_times::{SuiteTimes, VM_LANES};

#[derive(clap::Args)]
pub struct Args {
    /// The JUnit report (`cargo nextest run --profile ci` writes it); default: the first of
    /// `target/nextest/ci/junit.xml` (under the workspace, where nextest writes it) and
    /// `$CARGO_TARGET_DIR/nextest/ci/junit.xml` that exists.
    #[arg(long)]
    junit: Option<PathBuf>,
}

/// Where nextest's `ci` profile leaves its report.
fn default_report() -> PathBuf {
    let relative = "nextest/ci/junit.xml";
    let mut candidates = vec![PathBuf::from("target").join(relative)];
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        candidates.push(PathBuf::from(dir).join(relative));
    }
    candidates
        .iter()
        .find(|p| p.exists())
        .cloned()
        .unwrap_or_else(|| candidates[0].clone())
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let path = args.junit.unwrap_or_else(default_report);
    let times = SuiteTimes::read(&path)?;
    let lanes = times.lanes(VM_LANES);
    let vm = times.vm_tests();
    let failed = times.tests.iter().filter(|t| !t.passed).count();
    println!("{}", path.display());
    println!(
        "{} tests ({failed} failed), {:.0} s from the first start to the last end",
        times.tests.len(),
        times.span()
    );
    println!(
        "VM tests: {}, {:.0} s added up on {VM_LANES} lanes over {:.0} s: lanes idle {:.0} s, the last {:.0} s with one lane alone",
        vm.len(),
        lanes.busy,
        lanes.span,
        lanes.idle,
        lanes.tail_alone
    );
    let (phases, with) = times.phases_total();
    if with > 0 {
        println!(
            "phases of the {with} VM tests that print them: getting a node {:.0} s, waiting {:.0} s, checking {:.0} s",
            phases.getting_node, phases.waiting, phases.checking
        );
    }
    println!(
        "{:>7}  {:>7}  {:>7}  {:>7}  {:>7}  {:>7}  test",
        "secs", "start", "node", "waits", "checks", "rest"
    );
    let shown = |secs: Option<f64>| secs.map_or_else(|| "-".to_string(), |s| format!("{s:.0}"));
    for t in vm {
        println!(
            "{:>7.1}  {:>7.0}  {:>7}  {:>7}  {:>7}  {:>7}  {} {}{}",
            t.secs,
            t.start,
            shown(t.phases.map(|p| p.getting_node)),
            shown(t.phases.map(|p| p.waiting)),
            shown(t.phases.map(|p| p.checking)),
            shown(t.phases.map(|p| t.secs - p.getting_node - p.waiting - p.checking)),
            t.binary,
            t.name,
            if t.passed { "" } else { "  (FAILED)" }
        );
    }
    Ok(ExitCode::SUCCESS)
}
