//! The daemon's token kept fresh: at 80 % of its life the daemon asks the TokenRequest API for a
//! new token of its own ServiceAccount, as long-lived as the one it has (10 minutes at least, the
//! API's minimum), and writes it over the token file atomically; kube's client re-reads that file
//! at least once a minute. A failed renewal is logged and tried again in 30 s, until it works
//! or the old token expires (then the API answers 401 and the daemon's next request fails).

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};

use crate::files::write_atomic;
use crate::service_account_token::{self as token, Claims, TokenError};

/// The shortest token the TokenRequest API issues (seconds).
pub const MIN_LIFETIME_SECS: i64 = 600;
/// How long after a failed renewal the daemon tries again.
pub const RETRY: Duration = Duration::from_secs(30);

/// Why a renewal did not happen.
#[derive(Debug, thiserror::Error)]
pub enum RenewError {
    #[error("read the token file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the token in {path} {source}")]
    Token {
        path: PathBuf,
        #[source]
        source: TokenError,
    },
    #[error("request a token for ServiceAccount {namespace}/{name}: {source}")]
    Request {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("the TokenRequest for {0} came back without a token")]
    Empty(String),
    #[error("write the token file {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The claims of the token in `path`.
pub fn read(path: &Path) -> Result<Claims, RenewError> {
    let text = std::fs::read_to_string(path).map_err(|source| RenewError::Read {
        path: path.into(),
        source,
    })?;
    token::claims(&text).map_err(|source| RenewError::Token {
        path: path.into(),
        source,
    })
}

/// How long to wait from `now` (seconds since the epoch) until `claims` are due for renewal.
pub fn due_in(claims: &Claims, now: i64) -> Duration {
    Duration::from_secs(u64::try_from(claims.renew_at() - now).unwrap_or(0))
}

/// Asks for a new token of the account `path`'s token belongs to and writes it there; returns
/// its claims.
pub async fn renew_once(client: &kube::Client, path: &Path) -> Result<Claims, RenewError> {
    let current = read(path)?;
    let (namespace, name) = current.service_account().map_err(|source| RenewError::Token {
        path: path.into(),
        source,
    })?;
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(current.lifetime_secs().max(MIN_LIFETIME_SECS)),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let answer = accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .map_err(|source| RenewError::Request {
            namespace: namespace.into(),
            name: name.into(),
            source,
        })?;
    let fresh = answer
        .status
        .map(|s| s.token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| RenewError::Empty(current.subject.clone()))?;
    let claims = token::claims(&fresh).map_err(|source| RenewError::Token {
        path: path.into(),
        source,
    })?;
    // No trailing newline: the client sends the file's bytes as the bearer token.
    write_atomic(path, fresh.as_bytes(), 0o600).map_err(|source| RenewError::Write {
        path: path.into(),
        source,
    })?;
    Ok(claims)
}

fn now() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_second()
}

/// Renews the token in `path` whenever it is due, forever.
pub async fn keep_renewed(client: kube::Client, path: PathBuf) -> Infallible {
    loop {
        let wait = match read(&path) {
            Ok(claims) => due_in(&claims, now()),
            Err(err) => {
                tracing::warn!(error = %crate::error_chain::chain(&err), "cannot tell when to renew the daemon's token");
                RETRY
            }
        };
        tokio::time::sleep(wait).await;
        match renew_once(&client, &path).await {
            Ok(claims) => tracing::info!(
                account = %claims.subject,
                expires_at = claims.expires_at,
                "renewed the daemon's token"
            ),
            Err(err) => {
                tracing::warn!(error = %crate::error_chain::chain(&err), "could not renew the daemon's token; trying again in 30 s");
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

/// The token file of the current context's user in the kubeconfig at `path`, if it has one.
pub fn token_file(kubeconfig: &kube::config::Kubeconfig) -> Option<PathBuf> {
    let context = kubeconfig.current_context.as_deref()?;
    let user = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == context)?
        .context
        .as_ref()?
        .user
        .clone()?;
    kubeconfig
        .auth_infos
        .iter()
        .find(|a| a.name == user)?
        .auth_info
        .as_ref()?
        .token_file
        .as_ref()
        .map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service_account_token::tests::jwt;

    #[test]
    fn renewal_is_due_at_four_fifths_of_the_life_and_at_once_after_that() {
        let c = token::claims(&jwt(serde_json::json!({
            "sub": "system:serviceaccount:unbounded-system:agent-m1", "iat": 1_000, "exp": 2_000
        })))
        .unwrap();
        assert_eq!(due_in(&c, 1_000), Duration::from_secs(800));
        assert_eq!(due_in(&c, 1_799), Duration::from_secs(1));
        assert_eq!(due_in(&c, 1_900), Duration::ZERO);
    }

    #[test]
    fn the_token_file_is_the_current_users() {
        let text = crate::start::daemon_unit::kubeconfig(
            "https://10.0.0.1:6443",
            "Q0E=",
            crate::paths::DAEMON_TOKEN,
        );
        let parsed: kube::config::Kubeconfig = serde_yaml_ng::from_str(&text).unwrap();
        assert_eq!(
            token_file(&parsed),
            Some(PathBuf::from(crate::paths::DAEMON_TOKEN))
        );
        let mut other = parsed.clone();
        other.current_context = Some("nothing".into());
        assert_eq!(token_file(&other), None);
    }

    #[test]
    fn an_unreadable_token_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        assert!(
            read(&path)
                .unwrap_err()
                .to_string()
                .starts_with("read the token file")
        );
        std::fs::write(&path, "x.y").unwrap();
        let err = read(&path).unwrap_err().to_string();
        assert!(err.contains("token") && err.contains("is not a JWT"), "{err}");
    }
}
