//! `unbounded-agent start --config FILE`: preflight, host preparation, the machine with
//! containerd, kubelet and LocalDNS, started in docs/design.md §9 order (`agent::start`). Exit 0 once
//! kubelet is active in the machine; 1 with the reason otherwise.

use std::path::PathBuf;
use std::process::ExitCode;

use agent::start::{Options, Outcome};

#[derive(clap::Args)]
pub struct Args {
    /// The agent config JSON.
    #[arg(long)]
    pub config: PathBuf,
    /// A preflight check whose failures do not stop `start` (repeatable); one of the check names.
    #[arg(long = "ignore-preflight", value_name = "CHECK", value_parser = super::preflight::check_names())]
    pub ignore: Vec<String>,
    /// Multiplies every wait (machine answering 30 s, LocalDNS ready 60 s, containerd and
    /// kubelet active 60 s each). Default: 5 when `systemd-detect-virt --vm` says `qemu` (QEMU
    /// without KVM), else 1.
    #[arg(long, env = "UNBOUNDED_AGENT_TIMEOUT_SCALE",
          value_parser = clap::value_parser!(u32).range(1..=20))]
    pub timeout_scale: Option<u32>,
    /// The directory files are written below (tests only; commands still act on this host).
    #[arg(long, env = "UNBOUNDED_AGENT_ROOT", default_value = "/", hide = true)]
    pub root: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let options = Options {
        config_path: args.config,
        root: args.root,
        ignore_checks: args.ignore,
        timeout_scale: args.timeout_scale,
    };
    match agent::start::run(&options)? {
        Outcome::Started { slot, resumed_from } => {
            println!(
                "start: done: kubelet is active in machine {slot} (began at stage {})",
                resumed_from.as_str()
            );
        }
        Outcome::Unchanged { slot } => println!("start: done: machine {slot} unchanged"),
    }
    Ok(ExitCode::SUCCESS)
}
