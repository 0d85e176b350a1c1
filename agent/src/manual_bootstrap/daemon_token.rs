//! `--daemon`: the Machine's daemon access applied (server-side apply, so a re-run brings it up
//! to date and changes nothing else) and a token of its ServiceAccount for `Daemon.Token`. The
//! token lives [`TOKEN_SECS`]; the daemon renews its own once it runs, so the node only has to
//! start within that time.

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::Resource;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::cluster::Cluster;
use super::error::ManualBootstrapError;
use crate::machina::Machine;
use crate::machina::daemon_access::{self, NAMESPACE};

/// How long the token in the script is valid (seconds): a day, like the bootstrap token.
pub const TOKEN_SECS: i64 = 86_400;
/// The field manager of what the plugin applies.
const MANAGER: &str = "kubectl-unbounded";

async fn apply<K>(cluster: &Cluster, api: Api<K>, object: &K) -> Result<(), ManualBootstrapError>
where
    K: Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    let name = object.meta().name.clone().unwrap_or_default();
    let what = format!("applying {} {name}", K::kind(&()));
    api.patch(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(object))
        .await
        .map_err(|e| cluster.error(&what, e))?;
    Ok(())
}

/// Applies `machine`'s daemon access and returns a new token of its ServiceAccount.
pub async fn provision(cluster: &Cluster, machine: &Machine) -> Result<String, ManualBootstrapError> {
    let access = daemon_access::for_machine(machine);
    let client = &cluster.client;
    apply(
        cluster,
        Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE),
        &access.service_account,
    )
    .await?;
    apply(cluster, Api::<ClusterRole>::all(client.clone()), &access.role).await?;
    apply(
        cluster,
        Api::<ClusterRoleBinding>::all(client.clone()),
        &access.binding,
    )
    .await?;
    apply(
        cluster,
        Api::<Role>::namespaced(client.clone(), NAMESPACE),
        &access.token_role,
    )
    .await?;
    apply(
        cluster,
        Api::<RoleBinding>::namespaced(client.clone(), NAMESPACE),
        &access.token_binding,
    )
    .await?;
    let account = access.service_account.metadata.name.clone().unwrap_or_default();
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(TOKEN_SECS),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let answer = Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE)
        .create_token_request(&account, &PostParams::default(), &request)
        .await
        .map_err(|e| {
            cluster.error(
                &format!("requesting a token for ServiceAccount {NAMESPACE}/{account}"),
                e,
            )
        })?;
    answer
        .status
        .map(|s| s.token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| ManualBootstrapError::Api {
            what: format!("requesting a token for ServiceAccount {NAMESPACE}/{account}"),
            server: cluster.server.clone(),
            message: "the answer holds no token".into(),
        })
}
