//! The daemon acting on drift ([`super::drift`]): on a finished node, the active slot's applied
//! config against what its Machine and the configuration it follows ask for. A LocalDNS (or other
//! in-place) change runs `apply`, anything else a repave, each with the desired config written to
//! [`DESIRED_CONFIG`]; the Machine's status says what happened (condition `ConfigDrift`). A desired
//! config that failed is not tried again until it changes (or the daemon restarts), so a change
//! the node cannot take is reported once, not retried in a loop.

use std::path::{Path, PathBuf};

use kube::api::Api;
use sha2::{Digest, Sha256};

use super::drift::{self, Desired};
use super::error::DaemonError;
use super::run::Daemon;
use crate::error_chain::chain;
use crate::files::{under, write_atomic};
use crate::install_state::{self, Stage};
use crate::lifecycle::Operation;
use crate::lifecycle::plan::Change;
use crate::machina::machine_configuration_version::version_object_name;
use crate::machina::{
    Machine, MachineConfiguration, MachineConfigurationTemplate, MachineConfigurationVersion, MachinePhase,
};
use crate::start::node::applied_paths;

pub use crate::paths::DESIRED_CONFIG;
/// The Machine status condition of drift.
pub const CONDITION: &str = "ConfigDrift";

/// What the daemon remembers between passes.
#[derive(Debug, Default)]
pub struct DriftMemory {
    /// The digest of the last desired config that failed, and the last problem reported.
    failed: Option<String>,
    reported: Option<String>,
}

fn digest(json: &serde_json::Value) -> String {
    hex::encode(Sha256::digest(json.to_string().as_bytes()))
}

impl Daemon {
    /// The template `machine` follows: its MachineConfigurationVersion `<cfg>-v<N>` when the
    /// reference names a version, else the MachineConfiguration's own; `Ok(None)` without a
    /// reference; `Err` naming the missing object.
    async fn template(&self, machine: &Machine) -> Result<Option<MachineConfigurationTemplate>, String> {
        let Some(reference) = &machine.spec.configuration_ref else {
            return Ok(None);
        };
        if let Some(version) = reference.version {
            let name = version_object_name(&reference.name, version);
            return match Api::<MachineConfigurationVersion>::all(self.client.clone())
                .get_opt(&name)
                .await
            {
                Ok(Some(found)) => Ok(Some(found.spec.template)),
                Ok(None) => Err(format!("its MachineConfigurationVersion {name} does not exist")),
                Err(err) => Err(format!(
                    "reading MachineConfigurationVersion {name}: {}",
                    chain(&err)
                )),
            };
        }
        match Api::<MachineConfiguration>::all(self.client.clone())
            .get_opt(&reference.name)
            .await
        {
            Ok(Some(found)) => Ok(Some(found.spec.template)),
            Ok(None) => Err(format!(
                "its MachineConfiguration {} does not exist",
                reference.name
            )),
            Err(err) => Err(format!(
                "reading MachineConfiguration {}: {}",
                reference.name,
                chain(&err)
            )),
        }
    }

    /// The applied config of the finished node's active slot; `None` when there is no finished
    /// node or an operation is under way.
    fn applied_config(&self) -> Option<serde_json::Value> {
        let root = &self.settings.root;
        let state = install_state::load(&under(root, Path::new(install_state::PATH))).ok()??;
        if state.stage != Stage::Complete || state.operation.is_some() {
            return None;
        }
        let (applied, _) = applied_paths(root, state.slot);
        serde_json::from_slice(&std::fs::read(applied).ok()?).ok()
    }

    /// Reports a problem once (until another one, or none, comes).
    async fn report_once(&self, memory: &mut DriftMemory, message: String) -> Result<(), DaemonError> {
        if memory.reported.as_ref() != Some(&message) {
            tracing::warn!("{message}");
            self.write_machine_status(MachinePhase::Failed, &message, (CONDITION, "False", "NotApplied"))
                .await?;
            memory.reported = Some(message);
        }
        Ok(())
    }

    /// One pass: compares, and acts when the Machine asks for something else.
    pub(super) async fn act_on_drift(
        &self,
        machine: &Machine,
        memory: &mut DriftMemory,
    ) -> Result<(), DaemonError> {
        let Some(applied) = self.applied_config() else {
            return Ok(());
        };
        let template = match self.template(machine).await {
            Ok(t) => t,
            Err(why) => {
                return self
                    .report_once(memory, format!("cannot tell whether the node drifted: {why}"))
                    .await;
            }
        };
        let Desired { json, change } = match drift::desired(&applied, template.as_ref(), machine) {
            Ok(d) => d,
            Err(err) => return self.report_once(memory, format!("not applied: {err}")).await,
        };
        let (op, fields, verb) = match &change {
            Change::Same => {
                memory.reported = None;
                // The first pass, or a problem reported earlier that is over: say so once.
                let stale = machine
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.iter().find(|c| c.type_ == CONDITION))
                    .is_none_or(|c| c.status != "True");
                if stale {
                    let message = "the node runs the config its Machine asks for";
                    tracing::info!("{message}");
                    self.write_machine_status(MachinePhase::Ready, message, (CONDITION, "True", "InSync"))
                        .await?;
                }
                return Ok(());
            }
            Change::InPlace { fields } => (Operation::Apply, fields, "applying in place"),
            Change::NeedsRepave { fields } => (Operation::Repave { to: None }, fields, "repaving"),
        };
        let sha = digest(&json);
        if memory.failed.as_ref() == Some(&sha) {
            return Ok(());
        }
        let path = under(&self.settings.root, Path::new(DESIRED_CONFIG));
        let bytes = serde_json::to_vec_pretty(&json).expect("a JSON value serialises");
        write_atomic(&path, &bytes, 0o600).map_err(|source| DaemonError::Write {
            path: path.clone(),
            source,
        })?;
        let message = format!("the Machine asks for a change of {}: {verb}", fields.join(", "));
        tracing::info!("{message}");
        let phase = if matches!(op, Operation::Apply) {
            MachinePhase::Ready
        } else {
            MachinePhase::Provisioning
        };
        self.write_machine_status(phase, &message, (CONDITION, "Unknown", "Applying"))
            .await?;
        match self.run_lifecycle(op, Some(PathBuf::from(&path))).await {
            Ok(done) => {
                memory.failed = None;
                memory.reported = None;
                let message = format!("{} applied ({verb}): {done}", fields.join(", "));
                tracing::info!("{message}");
                let phase = if matches!(op, Operation::Apply) {
                    MachinePhase::Ready
                } else {
                    MachinePhase::Joining
                };
                self.write_machine_status(phase, &message, (CONDITION, "True", "Applied"))
                    .await
            }
            Err(failed) => {
                memory.failed = Some(sha);
                let message = format!("{} not applied ({verb} failed): {failed}", fields.join(", "));
                tracing::error!("{message}");
                memory.reported = Some(message.clone());
                self.write_machine_status(
                    MachinePhase::Failed,
                    &message,
                    (CONDITION, "False", "ApplyFailed"),
                )
                .await
            }
        }
    }
}
