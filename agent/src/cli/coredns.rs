//! `unbounded-agent coredns install`: fetch, verify and install the CoreDNS
//! artifact by hand, printing what was installed.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use crate::artifact::{self, FetchOptions, Fetcher};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Install CoreDNS into a machine rootfs (`<ROOTFS>/usr/local/bin/coredns`); keeps the binary
    /// there when its install record shows it is the same one (first line `kept <path>`).
    Install(InstallArgs),
}

#[derive(clap::Args)]
pub struct InstallArgs {
    /// The agent config (JSON); `Downloads.CoreDNS` and `OfflineArtifacts.Source` choose the source.
    #[arg(long)]
    pub config: PathBuf,
    /// The machine rootfs to install into (e.g. `/var/lib/machines/kube1`).
    #[arg(long)]
    pub rootfs: PathBuf,
}

pub fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Install(args) => install(args),
    }
}

fn install(args: InstallArgs) -> anyhow::Result<ExitCode> {
    let text = std::fs::read_to_string(&args.config)
        .with_context(|| format!("reading config {}", args.config.display()))?;
    let config = crate::validate::load_str(&text)
        .map_err(|problems| anyhow::anyhow!("config {}:\n{problems}", args.config.display()))?;
    let request = artifact::coredns::Request::from_raw(&config);
    let fetcher = Fetcher::new(FetchOptions::default());
    let done = artifact::coredns::install(&request, &args.rootfs, &fetcher)
        .with_context(|| format!("installing CoreDNS into {}", args.rootfs.display()))?;
    let installed = &done.installed;
    let verb = if done.changed { "installed" } else { "kept" };
    println!("{verb} {}", installed.path.display());
    println!("version {}", installed.version);
    println!("sha256 {}", installed.sha256);
    println!("source {}", installed.source);
    println!("source-sha256 {}", installed.source_sha256);
    Ok(ExitCode::SUCCESS)
}
