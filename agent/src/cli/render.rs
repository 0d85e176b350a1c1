//! `unbounded-agent render`: writes every LocalDNS file below a directory, as
//! if it were `/`, reading nothing of the real host.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::goal::{HostFacts, OptionalFacts};
use crate::names::Slot;
use anyhow::Context as _;

#[derive(clap::Args)]
pub struct Args {
    /// The agent config JSON.
    #[arg(long)]
    pub config: PathBuf,
    /// The directory standing for `/` (machine files go under `var/lib/machines/<machine>/`).
    #[arg(long)]
    pub root: PathBuf,
    /// The host's resolv.conf to discover upstreams from.
    #[arg(long)]
    pub host_resolv_conf: PathBuf,
    /// JSON with the other host facts: `resolved_resolv_conf`, `resolvectl_domain`,
    /// `local_addresses`, `node_name_addresses`, `default_route_address`.
    #[arg(long)]
    pub host_facts: Option<PathBuf>,
    /// The machine slot.
    #[arg(long, default_value = "kube1")]
    pub machine: Slot,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let config = match super::validate::load(&args.config)? {
        Ok(c) => c,
        Err(problems) => {
            for p in problems.iter() {
                eprintln!("{p}");
            }
            return Ok(ExitCode::from(super::validate::INVALID));
        }
    };
    let host_resolv_conf = std::fs::read_to_string(&args.host_resolv_conf).with_context(|| {
        format!(
            "cannot read --host-resolv-conf {}",
            args.host_resolv_conf.display()
        )
    })?;
    let optional: OptionalFacts = match &args.host_facts {
        None => OptionalFacts::default(),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read --host-facts {}", path.display()))?;
            serde_json::from_str(&text)
                .with_context(|| format!("--host-facts {} is not valid", path.display()))?
        }
    };
    let facts = HostFacts {
        host_resolv_conf,
        optional,
    };
    let goal =
        crate::goal::resolve(&config, &facts, args.machine).context("cannot resolve the goal state")?;
    let rendered = crate::render::render(&goal).context("cannot render")?;
    crate::render::write_under(&args.root, &rendered)?;
    Ok(ExitCode::SUCCESS)
}
