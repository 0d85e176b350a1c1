//! Which bootstrap token the script carries: the Secret the Machine's `bootstrapTokenRef`
//! names when it is usable, else an unexpired token made for this Machine before, else a new
//! one (created with an expiration and the Machine's label).

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, PostParams};

use crate::machina::Machine;

use super::cluster::Cluster;
use super::error::ManualBootstrapError;
use super::token::{self, BootstrapToken, MACHINE_ANNOTATION, MACHINE_LABEL, NAMESPACE, SECRET_TYPE, TTL};

/// Where the chosen token came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The Secret `spec.kubernetes.bootstrapTokenRef` names.
    Referenced,
    /// A token made for this Machine by an earlier run.
    Reused,
    /// Created by this run.
    Created,
}

/// The token for the script, and why it is that one.
#[derive(Debug, Clone)]
pub struct Chosen {
    pub token: BootstrapToken,
    pub source: Source,
    pub expires: Option<Timestamp>,
    /// Why the referenced Secret was passed over, if it was.
    pub skipped: Option<String>,
}

impl Chosen {
    /// One line for stderr: the token id, its origin and lifetime (never the secret).
    pub fn note(&self) -> String {
        let name = self.token.secret_name();
        let how = match self.source {
            Source::Referenced => "from spec.kubernetes.bootstrapTokenRef",
            Source::Reused => "reused",
            Source::Created => "created",
        };
        let until = self
            .expires
            .map_or_else(|| "never expires".to_owned(), |at| format!("expires {at}"));
        let skipped = self
            .skipped
            .as_deref()
            .map(|s| format!("; {s}"))
            .unwrap_or_default();
        format!("bootstrap token Secret {NAMESPACE}/{name} ({how}, {until}){skipped}")
    }
}

/// Chooses or creates the token for `machine` (see the module's order).
pub async fn choose(
    cluster: &Cluster,
    machine: &Machine,
    now: Timestamp,
) -> Result<Chosen, ManualBootstrapError> {
    let name = machine.metadata.name.clone().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(cluster.client.clone(), NAMESPACE);
    let mut skipped = None;
    let reference = machine
        .spec
        .kubernetes
        .as_ref()
        .and_then(|k| k.bootstrap_token_ref.as_ref());
    if let Some(reference) = reference {
        let what = format!("reading secret {NAMESPACE}/{}", reference.name);
        match secrets
            .get_opt(&reference.name)
            .await
            .map_err(|e| cluster.error(&what, e))?
        {
            Some(secret) => match token::usable(&secret, now) {
                Ok(found) => {
                    return Ok(Chosen {
                        token: found.token,
                        source: Source::Referenced,
                        expires: found.expires,
                        skipped: None,
                    });
                }
                Err(why) => {
                    skipped = Some(format!(
                        "bootstrapTokenRef {NAMESPACE}/{} not used: {why}",
                        reference.name
                    ));
                }
            },
            None => {
                skipped = Some(format!(
                    "bootstrapTokenRef {NAMESPACE}/{} not found",
                    reference.name
                ));
            }
        }
    }

    let selector = format!("{MACHINE_LABEL}={}", token::machine_label_value(&name));
    let listed = secrets
        .list(
            &ListParams::default()
                .labels(&selector)
                .fields(&format!("type={SECRET_TYPE}")),
        )
        .await
        .map_err(|e| cluster.error(&format!("listing bootstrap token secrets in {NAMESPACE}"), e))?;
    let reusable = listed
        .items
        .iter()
        .filter(|s| {
            s.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(MACHINE_ANNOTATION))
                .is_some_and(|m| *m == name)
        })
        .filter_map(|s| token::usable(s, now).ok())
        // The one living longest: a token without expiration, else the latest.
        .max_by_key(|u| u.expires.map_or((1, Timestamp::MIN), |at| (0, at)));
    if let Some(found) = reusable {
        return Ok(Chosen {
            token: found.token,
            source: Source::Reused,
            expires: found.expires,
            skipped,
        });
    }

    let token = BootstrapToken::generate().map_err(ManualBootstrapError::Random)?;
    let expires =
        Timestamp::from_second(now.as_second() + TTL.as_secs()).expect("now + 24 hours is a valid time");
    let what = format!("creating secret {NAMESPACE}/{}", token.secret_name());
    secrets
        .create(&PostParams::default(), &token.secret_for(&name, expires))
        .await
        .map_err(|e| cluster.error(&what, e))?;
    Ok(Chosen {
        token,
        source: Source::Created,
        expires: Some(expires),
        skipped,
    })
}
