//! `unbounded-agent`: the command line of the node agent.
//!
//! Each subcommand lives in its own file under `src/cli/` and returns the
//! process exit code.

mod cli;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "unbounded-agent",
    version,
    about = "Runs a Kubernetes node in a systemd-nspawn machine, with LocalDNS"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check an agent config; exit 2 with one line per problem.
    Validate(cli::validate::Args),
    /// Write every file LocalDNS installs under a directory, as if it were `/`.
    Render(cli::render::Args),
    /// Check that this host can run the configured node.
    Preflight(cli::preflight::Args),
    /// Print the Machina CustomResourceDefinitions as YAML.
    Crds(cli::crds::Args),
    /// Fetch, verify and install the CoreDNS artifact.
    #[command(name = "coredns", subcommand)]
    CoreDns(cli::coredns::Command),
    /// LocalDNS on this host: the network (link and NOTRACK rules) and the supervisor.
    #[command(name = "localdns", subcommand)]
    LocalDns(cli::localdns::Command),
    /// Make this host a node: the nspawn machine with containerd, kubelet and LocalDNS.
    Start(cli::start::Args),
    /// Managed node reboot: re-render LocalDNS (upstreams re-discovered), stop and start the node.
    Reboot(cli::lifecycle::RebootArgs),
    /// Bring a finished node to a changed config in place (LocalDNS on, off or changed).
    Apply(cli::lifecycle::ApplyArgs),
    /// Move the node to the other machine slot (kube1 <-> kube2), removing the old one.
    Repave(cli::lifecycle::RepaveArgs),
    /// Remove everything of the agent's from this host; report what could not be removed.
    Reset(cli::lifecycle::ResetArgs),
    /// Act on this host's Machine through the Machina API: run its MachineOperations.
    Daemon(cli::daemon::Args),
}

fn main() -> ExitCode {
    // Installed in the machine as the LocalDNS supervisor, the agent is that program.
    let argv0 = std::env::args().next().unwrap_or_default();
    if agent::machine::supervisor_entry::invoked_as_supervisor(&argv0) {
        return agent::machine::supervisor_entry::main();
    }
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let result = match Cli::parse().command {
        Command::Validate(args) => cli::validate::run(args),
        Command::Render(args) => cli::render::run(args),
        Command::Preflight(args) => cli::preflight::run(args),
        Command::Crds(args) => cli::crds::run(args),
        Command::CoreDns(cmd) => cli::coredns::run(cmd),
        Command::LocalDns(cmd) => cli::localdns::run(cmd),
        Command::Start(args) => cli::start::run(args),
        Command::Reboot(args) => cli::lifecycle::reboot(args),
        Command::Apply(args) => cli::lifecycle::apply(args),
        Command::Repave(args) => cli::lifecycle::repave(args),
        Command::Reset(args) => cli::lifecycle::reset(args),
        Command::Daemon(args) => cli::daemon::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
