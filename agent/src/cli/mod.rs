//! The command line of `unbounded-agent` ([`Cli`], what docs and tests parse command lines
//! with) and one module per subcommand.

pub mod coredns;
pub mod crds;
pub mod daemon;
pub mod lifecycle;
pub mod localdns;
pub mod output;
pub mod preflight;
pub mod render;
pub mod start;
pub mod status;
pub mod validate;

#[cfg(test)]
mod help;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// `--version`: the crate's version and the digest of the sources this binary was built from
/// (`crate::source_digest`, embedded by `build.rs`).
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\nunbounded-agent sources sha256:",
    env!("AGENT_SOURCES_SHA256")
);

#[derive(Parser)]
#[command(
    name = "unbounded-agent",
    version,
    long_version = LONG_VERSION,
    about = "Runs a Kubernetes node in a systemd-nspawn machine, with LocalDNS"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Check an agent config; exit 2 with one line per problem.
    Validate(validate::Args),
    /// Write every file LocalDNS installs under a directory, as if it were `/`.
    Render(render::Args),
    /// Check that this host can run the configured node.
    Preflight(preflight::Args),
    /// Print the Machina CustomResourceDefinitions as YAML.
    Crds(crds::Args),
    /// Fetch, verify and install the CoreDNS artifact.
    #[command(name = "coredns", subcommand)]
    CoreDns(coredns::Command),
    /// LocalDNS's host network on this host: `network apply` and `network reset` (link and NOTRACK rules).
    #[command(name = "localdns", subcommand)]
    LocalDns(localdns::Command),
    /// Make this host a node: the nspawn machine with containerd, kubelet and LocalDNS.
    Start(start::Args),
    /// Managed node reboot: re-render LocalDNS (upstreams re-discovered), stop and start the node.
    Reboot(lifecycle::RebootArgs),
    /// Bring a finished node to a changed config in place (LocalDNS on, off or changed).
    Apply(lifecycle::ApplyArgs),
    /// Move the node to the other machine slot (kube1 <-> kube2), removing the old one.
    Repave(lifecycle::RepaveArgs),
    /// Remove everything of the agent's from this host; report what could not be removed.
    Reset(lifecycle::ResetArgs),
    /// Act on this host's Machine through the Machina API: run its MachineOperations.
    Daemon(daemon::Args),
    /// The node on this host: install, operations, LocalDNS on both listeners; exit 1 on a problem.
    Status(status::Args),
}

impl Cli {
    /// Runs the parsed command; its exit code, or the error to print.
    pub fn run(self) -> anyhow::Result<ExitCode> {
        match self.command {
            Command::Validate(args) => validate::run(args),
            Command::Status(args) => status::run(args),
            Command::Render(args) => render::run(args),
            Command::Preflight(args) => preflight::run(args),
            Command::Crds(args) => crds::run(args),
            Command::CoreDns(cmd) => coredns::run(cmd),
            Command::LocalDns(cmd) => localdns::run(cmd),
            Command::Start(args) => start::run(args),
            Command::Reboot(args) => lifecycle::reboot(args),
            Command::Apply(args) => lifecycle::apply(args),
            Command::Repave(args) => lifecycle::repave(args),
            Command::Reset(args) => lifecycle::reset(args),
            Command::Daemon(args) => daemon::run(args),
        }
    }
}
