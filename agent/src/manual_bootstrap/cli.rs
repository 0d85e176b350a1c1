//! The command line of `kubectl-unbounded` (a kubectl plugin: `kubectl unbounded ...`).

use clap::{Args, Parser, Subcommand};

/// Machina commands for kubectl (`kubectl unbounded ...`).
#[derive(Debug, Parser)]
#[command(name = "kubectl-unbounded", version)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Commands on one Machine (unbounded-cloud.io/v1alpha3).
    Machine {
        #[command(subcommand)]
        command: MachineCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum MachineCommand {
    /// Print a bash script that makes a host the given Machine's node: it writes the agent config
    /// (with a bootstrap token, created or reused) and runs `unbounded-agent start`.
    ManualBootstrap(ManualBootstrapArgs),
    /// Print the ServiceAccount, ClusterRole and binding that let the Machine's agent daemon read
    /// its own Machine, configuration and Node (for `kubectl apply -f -`).
    DaemonAccess(DaemonAccessArgs),
}

/// The arguments of `machine daemon-access`.
#[derive(Debug, Clone, Default, Args)]
pub struct DaemonAccessArgs {
    /// The Machine's name (cluster-scoped).
    pub machine: String,
}

/// The arguments of `machine manual-bootstrap`; values are checked by
/// [`super::flags::Overrides::from_args`], so a bad one is one line and exit 1.
#[derive(Debug, Clone, Default, Args)]
pub struct ManualBootstrapArgs {
    /// The Machine's name (cluster-scoped).
    pub machine: String,
    /// Turn LocalDNS on (`LocalDNS.Enabled: true`), over the Machine's settings.
    #[arg(long)]
    pub local_dns: bool,
    /// The node's IP address(es) for the kubelet (`Kubelet.NodeIP`; comma-separated for dual stack).
    #[arg(long, value_name = "IP")]
    pub node_ip: Option<String>,
    /// A node label `key=value` (repeatable); wins over the Machine's label with the same key.
    #[arg(long = "node-label", value_name = "KEY=VALUE")]
    pub node_labels: Vec<String>,
    /// A taint the node registers with, `key[=value]:Effect` (repeatable); replaces the Machine's
    /// taint with the same key and effect.
    #[arg(long = "register-with-taint", value_name = "TAINT")]
    pub taints: Vec<String>,
    /// The offline artifacts bundle on the host (`OfflineArtifacts.Source`): an absolute path or a
    /// file:// URL.
    #[arg(long, value_name = "SRC")]
    pub offline_artifacts_source: Option<String>,
    /// Install the agent daemon (`Daemon.Token`): applies the Machine's daemon access and puts a
    /// 24-hour token of its ServiceAccount in the config; the daemon renews it.
    #[arg(long)]
    pub daemon: bool,
    /// An agent config (JSON object) to start from, for what a Machine does not carry: e.g.
    /// `MachineImage`, `ContainerImages`, `Downloads`, `Kubelet.Configuration.podCIDR`. The
    /// cluster's facts, the Machine, its configuration and the flags win over it.
    #[arg(long, value_name = "FILE")]
    pub base_config: Option<std::path::PathBuf>,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn every_argument_and_subcommand_of_kubectl_unbounded_has_a_help_text() {
        let missing = crate::clap_help::undocumented(&Cli::command());
        assert!(missing.is_empty(), "without a help text: {missing:?}");
    }

    #[test]
    fn manual_bootstrap_takes_the_machine_and_repeated_flags() {
        let cli = Cli::try_parse_from([
            "kubectl-unbounded",
            "machine",
            "manual-bootstrap",
            "m1",
            "--local-dns",
            "--node-ip",
            "10.0.0.5",
            "--node-label",
            "a=1",
            "--node-label",
            "b=2",
            "--register-with-taint",
            "t=x:NoSchedule",
            "--offline-artifacts-source",
            "/srv/bundle",
        ])
        .unwrap();
        let Command::Machine {
            command: MachineCommand::ManualBootstrap(args),
        } = cli.command
        else {
            panic!("not manual-bootstrap");
        };
        assert_eq!(args.machine, "m1");
        assert!(args.local_dns);
        assert_eq!(args.node_ip.as_deref(), Some("10.0.0.5"));
        assert_eq!(args.node_labels, ["a=1", "b=2"]);
        assert_eq!(args.taints, ["t=x:NoSchedule"]);
        assert_eq!(args.offline_artifacts_source.as_deref(), Some("/srv/bundle"));
        assert!(Cli::try_parse_from(["kubectl-unbounded", "machine", "manual-bootstrap"]).is_err());
    }
}
