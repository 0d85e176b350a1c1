//! `unbounded-agent daemon`: acts on this host's Machine's `MachineOperation`s (docs/operations.md).

use std::path::PathBuf;
use std::process::ExitCode;

use crate::daemon::run::Ended;
use crate::daemon::{Daemon, Settings};

/// `daemon --machine NAME [--kubeconfig FILE] [--once]`.
#[derive(clap::Args)]
pub struct Args {
    /// This host's Machine (cluster-scoped `machines.unbounded-cloud.io`).
    #[arg(long)]
    pub machine: String,
    /// The kubeconfig of the daemon's identity (default: as kubectl finds one).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Run what is there to run, then exit instead of watching.
    #[arg(long)]
    pub once: bool,
    #[command(flatten)]
    pub common: super::lifecycle::Common,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let settings = Settings {
        machine: args.machine,
        kubeconfig: args.kubeconfig,
        root: args.common.root,
        timeout_scale: args.common.timeout_scale,
        once: args.once,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let ended = runtime.block_on(async {
        let daemon = Daemon::connect(settings).await?;
        daemon.run().await
    })?;
    match ended {
        Ended::Idle => println!("daemon: nothing left to run"),
        Ended::Reset => println!("daemon: the agent was reset; nothing of it is left on this host"),
    }
    Ok(ExitCode::SUCCESS)
}
