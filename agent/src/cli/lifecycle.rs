//! The lifecycle commands on a finished node — `reboot`, `apply`, `repave`, `reset` — and what
//! they share with `start`: the wait scale, the test root, progress as `<operation>: ...` lines
//! on stdout (docs/lifecycle.md).

use std::path::PathBuf;
use std::process::ExitCode;

use crate::lifecycle::{Operation, Options, Outcome, Progress};
use crate::names::Slot;

/// Flags every lifecycle command takes.
#[derive(clap::Args, Debug, Clone)]
pub struct Common {
    /// Multiplies every wait (machine answering 30 s, LocalDNS ready 60 s, containerd and
    /// kubelet active 60 s each). Default: 10 when `systemd-detect-virt --vm` says `qemu` (QEMU
    /// without KVM), else 1.
    #[arg(long, env = "UNBOUNDED_AGENT_TIMEOUT_SCALE",
          value_parser = clap::value_parser!(u32).range(1..=20))]
    pub timeout_scale: Option<u32>,
    /// The directory files are written below (tests only; commands still act on this host).
    #[arg(long, env = "UNBOUNDED_AGENT_ROOT", default_value = "/", hide = true)]
    pub root: PathBuf,
}

/// `reboot`: no arguments besides the common ones.
#[derive(clap::Args)]
pub struct RebootArgs {
    #[command(flatten)]
    pub common: Common,
}

/// `apply --config FILE`.
#[derive(clap::Args)]
pub struct ApplyArgs {
    /// The changed agent config JSON to bring the node to.
    #[arg(long)]
    pub config: PathBuf,
    #[command(flatten)]
    pub common: Common,
}

/// `repave [--to SLOT] [--config FILE]`.
#[derive(clap::Args)]
pub struct RepaveArgs {
    /// The slot to move to (default: the other one).
    #[arg(long, value_parser = ["kube1", "kube2"])]
    pub to: Option<String>,
    /// The config to install the target slot with (default: the applied config).
    #[arg(long)]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub common: Common,
}

/// `reset [--dry-run [--output json]]`.
#[derive(clap::Args)]
pub struct ResetArgs {
    /// Print what would be removed; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// With `--dry-run`, `json`: `{"dryRun": true, "wouldRemove": [...]}` on stdout alone.
    #[arg(long, value_enum, default_value_t = super::output::Output::Text, requires = "dry_run")]
    pub output: super::output::Output,
    #[command(flatten)]
    pub common: Common,
}

/// Progress lines on stdout.
pub fn progress_lines() -> impl Progress {
    |line: &str| println!("{line}")
}

/// The closing line.
pub fn print_outcome(outcome: &Outcome) {
    match outcome {
        Outcome::Done { operation, slot, .. } => {
            println!("{operation}: done: kubelet is active in machine {slot}")
        }
        Outcome::Unchanged { operation, slot } => {
            println!("{operation}: done: machine {slot} unchanged")
        }
        Outcome::Reset(report) => println!(
            "reset: done: removed {} item(s); nothing of the agent's is left",
            report.removed.len()
        ),
        Outcome::ResetPlan(plan) => println!("reset (dry run): {} item(s); nothing changed", plan.len()),
    }
}

fn options(config: Option<PathBuf>, common: Common, dry_run: bool) -> Options {
    Options {
        config_path: config,
        root: common.root,
        ignore_checks: Vec::new(),
        timeout_scale: common.timeout_scale,
        dry_run,
    }
}

fn run_op(op: Operation, options: Options) -> anyhow::Result<ExitCode> {
    let outcome = crate::lifecycle::run(op, &options, &progress_lines())?;
    print_outcome(&outcome);
    Ok(ExitCode::SUCCESS)
}

pub fn reboot(args: RebootArgs) -> anyhow::Result<ExitCode> {
    run_op(Operation::Reboot, options(None, args.common, false))
}

pub fn apply(args: ApplyArgs) -> anyhow::Result<ExitCode> {
    run_op(Operation::Apply, options(Some(args.config), args.common, false))
}

pub fn repave(args: RepaveArgs) -> anyhow::Result<ExitCode> {
    let to = args.to.as_deref().map(str::parse::<Slot>).transpose()?;
    run_op(Operation::Repave { to }, options(args.config, args.common, false))
}

pub fn reset(args: ResetArgs) -> anyhow::Result<ExitCode> {
    if args.output == super::output::Output::Json {
        let silent = |_: &str| {};
        let outcome = crate::lifecycle::run(Operation::Reset, &options(None, args.common, true), &silent)?;
        let Outcome::ResetPlan(would_remove) = outcome else {
            anyhow::bail!("reset --dry-run changed something: {outcome:?}");
        };
        super::output::print_json(&serde_json::json!({ "dryRun": true, "wouldRemove": would_remove }))?;
        return Ok(ExitCode::SUCCESS);
    }
    run_op(Operation::Reset, options(None, args.common, args.dry_run))
}
