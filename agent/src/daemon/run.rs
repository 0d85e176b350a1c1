//! The daemon's loop against the API server: read this machine's `Machine` and the
//! `MachineOperation`s, delete the finished ones past their TTL, run the next one (its status
//! `InProgress`, the lifecycle operation on a blocking thread, then `Complete` or `Failed`), and
//! when there is nothing to run, watch the operations and its Node until one changes (or a resync
//! is due). Its Node deleted (with `updateStrategy: OnDelete`) → repave to the other slot, with
//! the Machine's status saying so ([`super::node_watch`]).

use std::path::PathBuf;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, WatchParams};

use super::act_on_drift::DriftMemory;
use super::error::DaemonError;
use super::node_watch::{self, NodeMemory};
use super::select::{self, Me};
use super::status;
use super::watch_event::{self, AfterEvent};
use crate::error_chain::chain;
use crate::lifecycle::{self, Operation, Options, Outcome};
use crate::machina::machine_operation::{MachineOperation, MachineOperationStatus};
use crate::machina::{Machine, MachineConfiguration, MachinePhase};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// How long one watch lasts before the daemon lists everything again (seconds).
const RESYNC_SECS: u32 = 60;

/// What the daemon is told.
#[derive(Debug, Clone)]
pub struct Settings {
    /// This host's `Machine`.
    pub machine: String,
    /// The kubeconfig to use; `None`: as kubectl finds one (`KUBECONFIG`, `~/.kube/config`).
    pub kubeconfig: Option<PathBuf>,
    /// The lifecycle operations' root and wait scale.
    pub root: PathBuf,
    pub timeout_scale: Option<u32>,
    /// Return when nothing is left to run instead of watching (tests, one-shot use).
    pub once: bool,
}

/// How the daemon ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// `--once` and nothing left to run.
    Idle,
    /// An `AgentReset` removed the agent from this host, the daemon's unit included.
    Reset,
}

/// The daemon, connected.
pub struct Daemon {
    pub(super) client: kube::Client,
    server: String,
    pub(super) settings: Settings,
    /// The kubeconfig's token file, which the daemon renews ([`super::renew`]).
    token_file: Option<PathBuf>,
}

fn now() -> Time {
    Time(Timestamp::now())
}

/// What a lifecycle outcome says in the operation's message.
fn describe(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Done {
            operation,
            slot,
            steps,
        } => {
            format!(
                "{operation}: done ({}): kubelet is active in machine {slot}",
                steps.join(" → ")
            )
        }
        Outcome::Unchanged { operation, slot } => format!("{operation}: machine {slot} unchanged"),
        Outcome::Reset(report) => format!(
            "reset: removed {} item(s) ({} already absent); nothing of the agent's is left",
            report.removed.len(),
            report.already_absent.len()
        ),
        Outcome::ResetPlan(plan) => format!("reset (dry run): {} item(s)", plan.len()),
    }
}

impl Daemon {
    /// Loads the kubeconfig and makes a client; nothing is sent yet.
    pub async fn connect(settings: Settings) -> Result<Daemon, DaemonError> {
        let kubeconfig_err = |message: String| DaemonError::Kubeconfig {
            path: settings
                .kubeconfig
                .as_ref()
                .map_or_else(|| "(inferred)".to_string(), |p| p.display().to_string()),
            message,
        };
        let mut token_file = None;
        let mut config = match &settings.kubeconfig {
            Some(path) => {
                let kubeconfig =
                    kube::config::Kubeconfig::read_from(path).map_err(|e| kubeconfig_err(chain(&e)))?;
                token_file = super::renew::token_file(&kubeconfig);
                kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                    .await
                    .map_err(|e| kubeconfig_err(chain(&e)))?
            }
            None => kube::Config::infer()
                .await
                .map_err(|e| kubeconfig_err(chain(&e)))?,
        };
        config.connect_timeout = Some(Duration::from_secs(10));
        config.read_timeout = Some(Duration::from_secs(u64::from(RESYNC_SECS) + 30));
        let server = config.cluster_url.to_string().trim_end_matches('/').to_owned();
        let client = kube::Client::try_from(config).map_err(|e| kubeconfig_err(chain(&e)))?;
        Ok(Daemon {
            client,
            server,
            settings,
            token_file,
        })
    }

    pub(super) fn api_err(&self, what: impl Into<String>) -> impl FnOnce(kube::Error) -> DaemonError + '_ {
        let what = what.into();
        move |source| DaemonError::Api {
            what,
            server: self.server.clone(),
            source,
        }
    }

    fn operations(&self) -> Api<MachineOperation> {
        Api::all(self.client.clone())
    }

    /// This machine: its name and labels, and the object.
    async fn me(&self) -> Result<(Me, Machine), DaemonError> {
        let machines: Api<Machine> = Api::all(self.client.clone());
        let name = &self.settings.machine;
        let machine = machines
            .get_opt(name)
            .await
            .map_err(self.api_err(format!("reading Machine {name}")))?
            .ok_or_else(|| DaemonError::NoMachine(name.clone()))?;
        let me = Me {
            name: name.clone(),
            labels: machine.metadata.labels.clone().unwrap_or_default(),
        };
        Ok((me, machine))
    }

    /// The Node `name`'s resource version when it exists.
    async fn node_version(&self, name: &str) -> Result<Option<String>, DaemonError> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let node = nodes
            .get_opt(name)
            .await
            .map_err(self.api_err(format!("reading Node {name}")))?;
        Ok(node.map(|n| n.metadata.resource_version.unwrap_or_default()))
    }

    /// The MachineConfiguration the Machine follows, if any (one that is missing counts as none).
    async fn configuration(&self, machine: &Machine) -> Result<Option<MachineConfiguration>, DaemonError> {
        let Some(reference) = &machine.spec.configuration_ref else {
            return Ok(None);
        };
        let configurations: Api<MachineConfiguration> = Api::all(self.client.clone());
        configurations
            .get_opt(&reference.name)
            .await
            .map_err(self.api_err(format!("reading MachineConfiguration {}", reference.name)))
    }

    /// Runs until `--once` finds nothing to do, an `AgentReset` is done, or an error; meanwhile
    /// the kubeconfig's token file, when it has one, is renewed before it expires.
    pub async fn run(&self) -> Result<Ended, DaemonError> {
        match &self.token_file {
            Some(path) if !self.settings.once => {
                tracing::info!(token_file = %path.display(), "the daemon renews its token");
                tokio::select! {
                    ended = self.act() => ended,
                    never = super::renew::keep_renewed(self.client.clone(), path.clone()) => match never {},
                }
            }
            _ => self.act().await,
        }
    }

    /// The loop. First the applied configs are checked against their sidecars
    /// ([`super::applied`]).
    async fn act(&self) -> Result<Ended, DaemonError> {
        super::applied::check(&self.settings.root)?;
        tracing::info!(machine = %self.settings.machine, server = %self.server, "daemon started");
        let mut node_memory = NodeMemory::default();
        let mut drift_memory = DriftMemory::default();
        // The last failed host-network repair said on the Machine (said once until it changes).
        let mut network_reported: Option<String> = None;
        loop {
            let (me, machine) = self.me().await?;
            let generation = machine.metadata.generation;
            let list = self
                .operations()
                .list(&ListParams::default())
                .await
                .map_err(self.api_err("listing MachineOperations"))?;
            let next_expiry = self.delete_expired(&list.items, &me).await;
            if let Some(op) = select::next(&list.items, &me) {
                if self.execute(op, generation).await? == Some(Ended::Reset) {
                    return Ok(Ended::Reset);
                }
                continue;
            }
            let node = node_watch::node_name(&machine);
            let node_version = self.node_version(&node).await?;
            let configuration = self.configuration(&machine).await?;
            let strategy = node_watch::strategy(configuration.as_ref());
            if node_version.is_some() && !node_memory.seen {
                tracing::info!("its Node {node} is registered: deleting it will repave this machine");
            }
            if node_watch::observe(&mut node_memory, node_version.is_some(), strategy) {
                self.repave_for_deleted_node(&node).await?;
                continue;
            }
            self.act_on_drift(&machine, &mut drift_memory).await?;
            self.check_host_network(&mut network_reported).await?;
            if self.settings.once {
                return Ok(Ended::Idle);
            }
            let wait = next_expiry.map_or(RESYNC_SECS, |secs| secs.clamp(1, RESYNC_SECS));
            let version = list.metadata.resource_version.unwrap_or_default();
            let nodes = Api::<Node>::all(self.client.clone());
            let this_node = Some(format!("metadata.name={node}"));
            let machines = Api::<Machine>::all(self.client.clone());
            let this_machine = Some(format!("metadata.name={}", self.settings.machine));
            let machine_version = machine.metadata.resource_version.clone().unwrap_or_default();
            let (configurations, configuration_version, this_configuration) = match &configuration {
                Some(c) => (
                    Some(Api::<MachineConfiguration>::all(self.client.clone())),
                    c.metadata.resource_version.clone().unwrap_or_default(),
                    Some(format!(
                        "metadata.name={}",
                        c.metadata.name.clone().unwrap_or_default()
                    )),
                ),
                None => (None, String::new(), None),
            };
            let configuration_changed = async {
                match configurations {
                    Some(api) => {
                        self.until_changed(
                            api,
                            "its MachineConfiguration",
                            &configuration_version,
                            wait,
                            this_configuration,
                        )
                        .await
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = self.until_changed(self.operations(), "MachineOperations", &version, wait, None) => {}
                // From the Node's own version; when it is absent, from now (its creation is a change).
                _ = self.until_changed(nodes, "its Node", node_version.as_deref().unwrap_or_default(), wait, this_node) => {}
                _ = self.until_changed(machines, "its Machine", &machine_version, wait, this_machine) => {}
                _ = configuration_changed => {}
            }
        }
    }

    /// Waits up to `secs` for the first change of `api`'s objects (those `fields` selects) after
    /// `version`. Errors end the wait early (the next list sees the truth).
    async fn until_changed<K>(
        &self,
        api: Api<K>,
        kind: &str,
        version: &str,
        secs: u32,
        fields: Option<String>,
    ) where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let window_ends = tokio::time::Instant::now() + Duration::from_secs(u64::from(secs));
        let mut params = WatchParams::default().timeout(secs);
        params.field_selector = fields;
        match api.watch(&params, version).await {
            Ok(stream) => {
                let mut stream = stream.boxed();
                let limit = Duration::from_secs(u64::from(secs) + 5);
                while let Ok(next) = tokio::time::timeout(limit, stream.try_next()).await {
                    match next {
                        Ok(event) => match watch_event::after(event.as_ref()) {
                            AfterEvent::Keep => {}
                            AfterEvent::Changed => return,
                            AfterEvent::WaitOutWindow(why) => {
                                tracing::debug!("watching {kind}: {why}; looking again in at most {secs} s");
                                tokio::time::sleep_until(window_ends).await;
                                return;
                            }
                        },
                        Err(err) => {
                            tracing::warn!(err = %chain(&err), "watching {kind}");
                            return;
                        }
                    }
                }
            }
            Err(err) => {
                tracing::warn!(err = %chain(&err), "watching {kind}; listing again in 5 s");
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }
    }

    /// Writes the Machine's status: `phase`, `message`, and one condition `(type, status, reason)`.
    pub(super) async fn write_machine_status(
        &self,
        phase: MachinePhase,
        message: &str,
        condition: (&str, &str, &str),
    ) -> Result<(), DaemonError> {
        let (type_, status, reason) = condition;
        let condition = new_condition(type_, status, reason, message);
        self.patch_machine_status(serde_json::json!({
            "phase": phase, "message": message, "conditions": [condition]
        }))
        .await
    }

    /// Merges `status` into this Machine's status.
    async fn patch_machine_status(&self, status: serde_json::Value) -> Result<(), DaemonError> {
        let name = &self.settings.machine;
        let patch = Patch::Merge(serde_json::json!({ "status": status }));
        Api::<Machine>::all(self.client.clone())
            .patch_status(name, &PatchParams::default(), &patch)
            .await
            .map_err(self.api_err(format!("writing the status of Machine {name}")))?;
        Ok(())
    }

    /// One check of LocalDNS's host network ([`super::host_network`]): a repair is logged and
    /// said in the Machine's condition `HostNetwork` (`True`/`Repaired`, what was restored); a
    /// repair that failed is said once (`False`/`RepairFailed`) until it changes.
    async fn check_host_network(&self, reported: &mut Option<String>) -> Result<(), DaemonError> {
        use super::host_network::{self, Checked};
        let root = self.settings.root.clone();
        let checked = tokio::task::spawn_blocking(move || host_network::check(&root))
            .await
            .unwrap_or_else(|e| Err(format!("the host network check panicked: {e}")));
        let (status, reason, message) = match checked {
            Ok(Checked::Skipped(why)) => {
                tracing::debug!("host network not checked: {why}");
                return Ok(());
            }
            Ok(Checked::InPlace) => {
                *reported = None;
                return Ok(());
            }
            Ok(Checked::Repaired { report, restarted }) => {
                let message = host_network::describe(&report, &restarted);
                tracing::warn!("{message}");
                ("True", "Repaired", message)
            }
            Err(why) => {
                let message = format!("cannot restore the LocalDNS host network: {why}");
                if reported.as_ref() == Some(&message) {
                    return Ok(());
                }
                tracing::error!("{message}");
                ("False", "RepairFailed", message)
            }
        };
        self.set_condition("HostNetwork", status, reason, &message)
            .await?;
        *reported = Some(message);
        Ok(())
    }

    /// Sets one condition of this Machine's status, keeping the others (by type).
    async fn set_condition(
        &self,
        type_: &str,
        status: &str,
        reason: &str,
        message: &str,
    ) -> Result<(), DaemonError> {
        let name = &self.settings.machine;
        let machine = Api::<Machine>::all(self.client.clone())
            .get_status(name)
            .await
            .map_err(self.api_err(format!("reading the status of Machine {name}")))?;
        let mut conditions: Vec<Condition> = machine
            .status
            .map(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.type_ != type_)
            .collect();
        conditions.push(new_condition(type_, status, reason, message));
        self.patch_machine_status(serde_json::json!({ "conditions": conditions }))
            .await
    }

    /// The Node was deleted: repave to the other slot, the Machine's status saying so.
    async fn repave_for_deleted_node(&self, node: &str) -> Result<(), DaemonError> {
        let message =
            format!("the Node {node} was deleted (updateStrategy OnDelete): repaving to the other slot");
        tracing::info!("{message}");
        self.write_machine_status(
            MachinePhase::Provisioning,
            &message,
            ("NodeDeletedRepave", "Unknown", "Repaving"),
        )
        .await?;
        match self.run_lifecycle(Operation::Repave { to: None }, None).await {
            Ok(done) => {
                let message = format!("repaved after the Node {node} was deleted: {done}");
                tracing::info!("{message}");
                self.write_machine_status(
                    MachinePhase::Joining,
                    &message,
                    ("NodeDeletedRepave", "True", "Repaved"),
                )
                .await
            }
            Err(failed) => {
                let message = format!("repaving after the Node {node} was deleted failed: {failed}");
                tracing::error!("{message}");
                self.write_machine_status(
                    MachinePhase::Failed,
                    &message,
                    ("NodeDeletedRepave", "False", "RepaveFailed"),
                )
                .await
            }
        }
    }

    /// Runs a lifecycle operation on a blocking thread: what it did, or why it failed.
    pub(super) async fn run_lifecycle(
        &self,
        op: Operation,
        config_path: Option<PathBuf>,
    ) -> Result<String, String> {
        let options = Options {
            config_path,
            root: self.settings.root.clone(),
            ignore_checks: Vec::new(),
            timeout_scale: self.settings.timeout_scale,
            dry_run: false,
        };
        let joined = tokio::task::spawn_blocking(move || {
            let progress = |line: &str| tracing::info!("{line}");
            lifecycle::run(op, &options, &progress)
        })
        .await;
        match joined {
            Ok(Ok(outcome)) => Ok(describe(&outcome)),
            Ok(Err(err)) => Err(chain(&err)),
            Err(err) => Err(format!("the lifecycle operation's task failed: {err}")),
        }
    }

    /// Deletes this machine's operations that are past their TTL; returns the seconds until the
    /// next one expires, if one will.
    async fn delete_expired(&self, ops: &[MachineOperation], me: &Me) -> Option<u32> {
        let now = now();
        let mut soonest: Option<u32> = None;
        for op in ops.iter().filter(|op| select::targets(op, me)) {
            let name = op.metadata.name.clone().unwrap_or_default();
            if select::expired(op, &now) {
                match self.operations().delete(&name, &DeleteParams::default()).await {
                    Ok(_) => tracing::info!(operation = %name, "deleted: past its ttlSecondsAfterFinished"),
                    Err(err) => tracing::warn!(operation = %name, err = %chain(&err), "could not delete"),
                }
                continue;
            }
            let (Some(ttl), Some(done)) = (
                op.spec.ttl_seconds_after_finished,
                op.status.as_ref().and_then(|s| s.completed_at.as_ref()),
            ) else {
                continue;
            };
            let left = i64::from(ttl) - now.0.duration_since(done.0).as_secs();
            let left = u32::try_from(left.max(1)).unwrap_or(RESYNC_SECS);
            soonest = Some(soonest.map_or(left, |s| s.min(left)));
        }
        soonest
    }

    async fn write_status(&self, name: &str, status: &MachineOperationStatus) -> Result<(), DaemonError> {
        let patch = Patch::Merge(serde_json::json!({ "status": status }));
        match self
            .operations()
            .patch_status(name, &PatchParams::default(), &patch)
            .await
        {
            Ok(_) => Ok(()),
            // Deleted meanwhile: nobody is left to read its status.
            Err(kube::Error::Api(response)) if response.code == 404 => {
                tracing::warn!(operation = %name, "deleted while it ran; its status is not written");
                Ok(())
            }
            Err(err) => Err(self
                .api_err(format!("writing the status of MachineOperation {name}"))(
                err
            )),
        }
    }

    /// Runs one operation and records it; `Some(Ended::Reset)` after a successful reset.
    async fn execute(
        &self,
        op: &MachineOperation,
        machine_generation: Option<i64>,
    ) -> Result<Option<Ended>, DaemonError> {
        let name = op.metadata.name.clone().unwrap_or_default();
        let kind = op.spec.operation_kind;
        let lifecycle_op = select::lifecycle_operation(kind).expect("select::next picks handled kinds only");
        let resumed = op.status.as_ref().and_then(|s| s.started_at.as_ref()).is_some();
        let message = match (lifecycle_op, resumed) {
            (Operation::Reset, false) => "resetting: removing the node and the agent from the host",
            (Operation::Reset, true) => "resetting again: the daemon was stopped while it ran",
            (_, false) => "rebooting the node (managed reboot)",
            (_, true) => "rebooting the node again: the daemon was stopped while it ran",
        };
        tracing::info!(operation = %name, ?kind, "{message}");
        let started = status::in_progress(
            op.status.as_ref(),
            message,
            &now(),
            machine_generation,
            op.metadata.generation,
        );
        self.write_status(&name, &started).await?;

        let result = self.run_lifecycle(lifecycle_op, None).await;
        match &result {
            Ok(message) => tracing::info!(operation = %name, "complete: {message}"),
            Err(message) => tracing::error!(operation = %name, "failed: {message}"),
        }
        let done = status::finished(
            &started,
            result.as_deref().map_err(String::as_str),
            &now(),
            op.metadata.generation,
        );
        self.write_status(&name, &done).await?;
        Ok((lifecycle_op == Operation::Reset && result.is_ok()).then_some(Ended::Reset))
    }
}

/// A condition that changed now.
fn new_condition(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: now(),
        observed_generation: None,
    }
}
