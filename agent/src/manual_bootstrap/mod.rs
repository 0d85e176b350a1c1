//! `kubectl unbounded machine manual-bootstrap <machine>`: reads a Machine (and its
//! configuration) from the cluster, creates or reuses a bootstrap token, and renders a bash
//! script that writes the agent config and runs `unbounded-agent start` on the host.
//!
//! One job per file: [`cli`] the command line, [`flags`] checks the flag values, [`cluster`] the
//! reads from the API server, [`token`] the bootstrap token and its Secret, [`token_store`]
//! choosing or creating it, [`daemon_token`] the daemon's access and token (`--daemon`),
//! [`assemble`] the agent config, [`script`] the script, [`error`] why
//! it fails.

pub mod assemble;
pub mod cli;
pub mod cluster;
pub mod daemon_token;
pub mod error;
pub mod flags;
pub mod script;
pub mod token;
pub mod token_store;

pub use cli::ManualBootstrapArgs;
pub use error::ManualBootstrapError;

use k8s_openapi::jiff::Timestamp;

/// What a run produced: the script for stdout and a note on the token for stderr.
#[derive(Debug)]
pub struct Outcome {
    /// The bash script (holds the bootstrap token).
    pub script: String,
    /// Which token the script carries and where it came from (no secret).
    pub token_note: String,
}

/// `machine daemon-access`: the Machine's daemon access objects as YAML (the Machine must exist).
pub async fn daemon_access(machine: &str) -> Result<String, ManualBootstrapError> {
    let cluster = cluster::Cluster::connect().await?;
    let machine = cluster.machine(machine).await?;
    crate::machina::daemon_access::for_machine(&machine)
        .to_yaml()
        .map_err(|e| ManualBootstrapError::Render(format!("the daemon access objects as YAML: {e}")))
}

/// Runs the whole command against the cluster the kubeconfig names.
pub async fn run(args: &ManualBootstrapArgs) -> Result<Outcome, ManualBootstrapError> {
    let overrides = flags::Overrides::from_args(args)?;
    let base = args.base_config.as_deref().map(flags::base_config).transpose()?;
    let cluster = cluster::Cluster::connect().await?;
    let machine = cluster.machine(&args.machine).await?;
    let template = cluster.template_for(&machine).await?;
    let facts = cluster.facts().await?;
    let chosen = token_store::choose(&cluster, &machine, Timestamp::now()).await?;
    let mut raw = assemble::agent_config(&facts, &machine, template.as_ref(), &chosen.token, &overrides);
    let mut token_note = chosen.note();
    if args.daemon {
        let token = daemon_token::provision(&cluster, &machine).await?;
        raw.daemon = Some(crate::config::DaemonConfig {
            token: Some(token),
            ..Default::default()
        });
        token_note.push_str(&format!(
            "; the daemon's token (ServiceAccount {}/{}) is valid for {} h, then the daemon renews it",
            crate::machina::daemon_access::NAMESPACE,
            crate::machina::daemon_access::service_account_name(&args.machine),
            daemon_token::TOKEN_SECS / 3600
        ));
    }
    if let Some(base) = &base {
        raw = assemble::over_base(base, &raw)?;
    }
    let json = assemble::checked_json(&raw)?;
    Ok(Outcome {
        script: script::render(&json, &args.machine, &script::Target::default())
            .map_err(|e| ManualBootstrapError::Render(e.to_string()))?,
        token_note,
    })
}
