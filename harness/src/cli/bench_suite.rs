//! `harness bench suite`: where a test run's time went, from nextest's JUnit report — the run's
//! span, the `vm` group's lanes busy and idle, the lone tail, and each VM test longest first.

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
    println!("{:>7}  {:>7}  test", "secs", "start");
    for t in vm {
        println!(
            "{:>7.1}  {:>7.0}  {} {}{}",
            t.secs,
            t.start,
            t.binary,
            t.name,
            if t.passed { "" } else { "  (FAILED)" }
        );
    }
    Ok(ExitCode::SUCCESS)
}
