//! `unbounded-agent localdns ...`: the LocalDNS host network by hand (and from its boot-time unit),
//! and the upstreams taken again from the host's resolvers (from the network unit at boot and the
//! upstreams' path unit).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;

use crate::hostnet::{self, NetworkSpec, ResetPaths};
use crate::paths;
use crate::validate::{self, Config};

#[derive(clap::Subcommand)]
pub enum Command {
    /// The `localdns` dummy link and the `ip unbounded_localdns` NOTRACK table.
    #[command(subcommand)]
    Network(NetworkCommand),
    /// The node listener's upstreams (what it forwards to), from the host's resolvers.
    #[command(subcommand)]
    Upstreams(UpstreamsCommand),
}

#[derive(clap::Subcommand)]
pub enum UpstreamsCommand {
    /// Discover the upstreams again; when they changed, rewrite the active machine's Corefile and
    /// say old → new (idempotent).
    Refresh(RefreshArgs),
}

#[derive(clap::Args)]
pub struct RefreshArgs {
    /// Also reload a running `localdns.service` when the upstreams changed.
    #[arg(long)]
    reload: bool,
    /// The directory the node is installed below (tests use a temporary one).
    #[arg(long, env = "UNBOUNDED_AGENT_ROOT", default_value = "/")]
    root: PathBuf,
}

#[derive(clap::Subcommand)]
pub enum NetworkCommand {
    /// Create or repair link and table (idempotent); writes the nft script it applies.
    Apply(ApplyArgs),
    /// Remove link, table, network unit, nft script and nspawn drop-ins; report what was left.
    Reset(ResetArgs),
}

#[derive(clap::Args)]
pub struct ApplyArgs {
    /// The agent config JSON.
    #[arg(long)]
    config: PathBuf,
    /// The directory files are written below (tests use a temporary one).
    #[arg(long, env = "UNBOUNDED_AGENT_ROOT", default_value = "/")]
    root: PathBuf,
}

#[derive(clap::Args)]
pub struct ResetArgs {
    /// The agent config JSON (not needed: reset removes whatever carries our name).
    #[arg(long)]
    config: Option<PathBuf>,
    /// The directory files are removed below (tests use a temporary one).
    #[arg(long, env = "UNBOUNDED_AGENT_ROOT", default_value = "/")]
    root: PathBuf,
}

pub fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Network(NetworkCommand::Apply(args)) => apply(&args),
        Command::Network(NetworkCommand::Reset(args)) => reset(&args),
        Command::Upstreams(UpstreamsCommand::Refresh(args)) => refresh(&args),
    }
}

fn refresh(args: &RefreshArgs) -> anyhow::Result<ExitCode> {
    let say = |line: &str| println!("{line}");
    crate::lifecycle::upstreams_refresh::refresh(&args.root, args.reload, &say)
        .context("cannot refresh the LocalDNS upstreams")?;
    Ok(ExitCode::SUCCESS)
}

fn load(path: &Path) -> anyhow::Result<Config> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read config {}", path.display()))?;
    validate::parse(&text)
        .map_err(|problems| anyhow::anyhow!("invalid config {}:\n{problems}", path.display()))
}

fn apply(args: &ApplyArgs) -> anyhow::Result<ExitCode> {
    let config = load(&args.config)?;
    let Some(l) = &config.local_dns else {
        println!(
            "LocalDNS is disabled in {}: nothing to apply",
            args.config.display()
        );
        return Ok(ExitCode::SUCCESS);
    };
    let spec = NetworkSpec::from_config(l);
    let script = hostnet::nft_script(&config, l);
    // Applied first, so that a refused apply (a foreign `localdns` link) changes nothing at all.
    let report = hostnet::apply(&spec, &script).context("cannot apply the LocalDNS host network")?;
    let script_path = crate::files::under(&args.root, Path::new(paths::NFT_SCRIPT));
    crate::files::write_atomic(&script_path, script.as_bytes(), 0o644)
        .with_context(|| format!("cannot write {}", script_path.display()))?;
    print!("{report}");
    Ok(ExitCode::SUCCESS)
}

fn reset(args: &ResetArgs) -> anyhow::Result<ExitCode> {
    if let Some(path) = &args.config {
        // Read only to report a bad path early; reset removes whatever carries our name.
        load(path)?;
    }
    let report = hostnet::reset(&ResetPaths::new(&args.root));
    print!("{report}");
    if report.is_clean() {
        println!("localdns network reset: done");
        Ok(ExitCode::SUCCESS)
    } else {
        println!(
            "localdns network reset: {} item(s) left behind",
            report.failed.len()
        );
        Ok(ExitCode::FAILURE)
    }
}
