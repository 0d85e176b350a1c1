//! The node's Machine and its daemon's access, made in the lab's cluster before `start`, so every
//! lab node is what a real node of this system is (docs/lab.md, "Machines and the daemon"):
//!
//! * the Machine, named after the node (the agent config's `MachineName`), with an empty spec: it
//!   asks for nothing the node config did not, so the node config stays what the node runs until
//!   someone sets a field of the Machine, which the daemon then applies;
//! * unless the node config says `"daemon": false`, the daemon's ServiceAccount and roles
//!   (`agent::machina::daemon_access::for_machine`, what `kubectl unbounded machine daemon-access`
//!   prints) and a token of that ServiceAccount for the config's `Daemon.Token`, with which
//!   `start` installs `unbounded-agent-daemon.service`.
//!
//! Every object goes in by server-side apply under [`FIELD_MANAGER`]: deploying the same node
//! again changes nothing but the token.

use agent::machina::daemon_access::{self, NAMESPACE};
use agent::machina::{Machine, MachineSpec};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::controlplane::ClusterAccess;

/// The field manager of what the lab applies for a node.
pub const FIELD_MANAGER: &str = "unbounded-lab";

/// How long the daemon's first token lives: a year, so a node checkpoint resumed long after it
/// was saved still starts a daemon that can reach the API server (the daemon renews its token at
/// four fifths of its life, so a running node never depends on this figure).
pub const TOKEN_LIFETIME_SECS: i64 = 365 * 24 * 3600;

/// A Machine or its daemon's access that could not be made.
#[derive(Debug, thiserror::Error)]
pub enum MachineError {
    #[error("Machine {machine}: starting a tokio runtime: {source}")]
    Runtime {
        machine: String,
        #[source]
        source: std::io::Error,
    },
    #[error("Machine {machine}: reaching the API server: {why}")]
    Client { machine: String, why: String },
    #[error("Machine {machine}: applying {what}: {source}")]
    Apply {
        machine: String,
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("Machine {machine}: requesting a token for {NAMESPACE}/{account}: {why}")]
    Token {
        machine: String,
        account: String,
        why: String,
    },
}

/// Applies `machine`'s Machine (empty spec) and, when `daemon` is set, its daemon's access, in the
/// cluster `cluster` gives access to; returns the daemon's token (`None` without a daemon).
pub fn give_the_node_its_machine(
    cluster: &ClusterAccess,
    machine: &str,
    daemon: bool,
) -> Result<Option<String>, MachineError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| MachineError::Runtime {
            machine: machine.into(),
            source,
        })?;
    runtime.block_on(async {
        let client = cluster.client().await.map_err(|e| MachineError::Client {
            machine: machine.into(),
            why: e.to_string(),
        })?;
        let object = Machine::new(machine, MachineSpec::default());
        apply(Api::<Machine>::all(client.clone()), &object, machine).await?;
        if !daemon {
            return Ok(None);
        }
        apply_daemon_access(&client, &object).await?;
        request_token(&client, machine).await.map(Some)
    })
}

/// The objects of `machine`'s daemon access (the Machine as it is now: a Machine that follows a
/// configuration lets its daemon read that configuration too).
pub async fn apply_daemon_access(client: &kube::Client, machine: &Machine) -> Result<(), MachineError> {
    let name = machine.name_any();
    let access = daemon_access::for_machine(machine);
    apply(
        Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE),
        &access.service_account,
        &name,
    )
    .await?;
    apply(Api::<ClusterRole>::all(client.clone()), &access.role, &name).await?;
    apply(
        Api::<ClusterRoleBinding>::all(client.clone()),
        &access.binding,
        &name,
    )
    .await?;
    apply(
        Api::<Role>::namespaced(client.clone(), NAMESPACE),
        &access.token_role,
        &name,
    )
    .await?;
    apply(
        Api::<RoleBinding>::namespaced(client.clone(), NAMESPACE),
        &access.token_binding,
        &name,
    )
    .await
}

async fn apply<K>(api: Api<K>, object: &K, machine: &str) -> Result<(), MachineError>
where
    K: Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    let name = object.name_any();
    let what = format!("{} {name}", K::kind(&()));
    // Server-side apply needs apiVersion and kind in the body: set from the type, whatever the
    // object's own serialisation carries.
    let mut body = serde_json::to_value(object).map_err(|e| MachineError::Apply {
        machine: machine.into(),
        what: what.clone(),
        source: kube::Error::SerdeError(e),
    })?;
    body["apiVersion"] = K::api_version(&()).into();
    body["kind"] = K::kind(&()).into();
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(&name, &params, &Patch::Apply(&body))
        .await
        .map(drop)
        .map_err(|source| MachineError::Apply {
            machine: machine.into(),
            what,
            source,
        })
}

async fn request_token(client: &kube::Client, machine: &str) -> Result<String, MachineError> {
    let account = daemon_access::service_account_name(machine);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(TOKEN_LIFETIME_SECS),
            ..Default::default()
        },
        ..Default::default()
    };
    let token = |why: String| MachineError::Token {
        machine: machine.into(),
        account: account.clone(),
        why,
    };
    let answer = Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE)
        .create_token_request(&account, &PostParams::default(), &request)
        .await
        .map_err(|e| token(e.to_string()))?;
    answer
        .status
        .map(|s| s.token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| token("the answer carries no token".into()))
}
