//! A bootstrap token (`<id>.<secret>`), the Secret the API server's bootstrap authenticator reads
//! it from, and whether an existing Secret holds a usable one.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use sha2::{Digest, Sha256};

/// The namespace bootstrap token Secrets live in.
pub const NAMESPACE: &str = "kube-system";
/// The Secret type the bootstrap authenticator reads.
pub const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
/// The group the token's holder joins (kubeadm's default, bound to the CSR roles).
pub const BOOTSTRAP_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";
/// The label marking a token made for one Machine (value: [`machine_label_value`]).
pub const MACHINE_LABEL: &str = "unbounded-cloud.io/machine";
/// The annotation holding that Machine's full name (a label value holds 63 characters at most).
pub const MACHINE_ANNOTATION: &str = "unbounded-cloud.io/machine";
/// How long a new token lives (kubeadm's default).
pub const TTL: SignedDuration = SignedDuration::from_hours(24);
/// A token expiring sooner than this is not reused: the node must still join with it.
pub const MIN_REMAINING: SignedDuration = SignedDuration::from_hours(1);

const ALPHABET: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// A string that is not a bootstrap token.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0:?} is not a bootstrap token: expected <6 of [a-z0-9]>.<16 of [a-z0-9]>")]
pub struct NotAToken(pub String);

/// A bootstrap token: 6 and 16 characters of `[a-z0-9]`.
#[derive(Clone, PartialEq, Eq)]
pub struct BootstrapToken {
    id: String,
    secret: String,
}

impl BootstrapToken {
    /// A new random token from the OS random source.
    pub fn generate() -> Result<BootstrapToken, getrandom::Error> {
        Ok(BootstrapToken {
            id: random_chars(6)?,
            secret: random_chars(16)?,
        })
    }

    /// The token of `id` and `secret` when both have the bootstrap token format.
    pub fn new(id: &str, secret: &str) -> Option<BootstrapToken> {
        let ok = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| ALPHABET.contains(&b));
        (ok(id, 6) && ok(secret, 16)).then(|| BootstrapToken {
            id: id.to_owned(),
            secret: secret.to_owned(),
        })
    }

    /// Parses `<id>.<secret>` (as a kubelet presents it), refusing anything else.
    pub fn parse(text: &str) -> Result<BootstrapToken, NotAToken> {
        text.split_once('.')
            .and_then(|(id, secret)| BootstrapToken::new(id, secret))
            .ok_or_else(|| NotAToken(text.to_owned()))
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// The secret half (for the Secret's `token-secret`; never log it).
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// `bootstrap-token-<id>`, the name the authenticator looks the token up by.
    pub fn secret_name(&self) -> String {
        format!("bootstrap-token-{}", self.id)
    }

    /// The Secret for this token, made for `machine`, expiring at `expires`.
    pub fn secret_for(&self, machine: &str, expires: Timestamp) -> Secret {
        let data = [
            ("description", format!("manual bootstrap of machine {machine}")),
            ("token-id", self.id.clone()),
            ("token-secret", self.secret.clone()),
            ("expiration", expires.to_string()),
            ("usage-bootstrap-authentication", "true".to_owned()),
            ("usage-bootstrap-signing", "true".to_owned()),
            ("auth-extra-groups", BOOTSTRAP_GROUP.to_owned()),
        ];
        Secret {
            metadata: ObjectMeta {
                name: Some(self.secret_name()),
                namespace: Some(NAMESPACE.to_owned()),
                labels: Some([(MACHINE_LABEL.to_owned(), machine_label_value(machine))].into()),
                annotations: Some([(MACHINE_ANNOTATION.to_owned(), machine.to_owned())].into()),
                ..Default::default()
            },
            type_: Some(SECRET_TYPE.to_owned()),
            string_data: Some(data.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()),
            ..Default::default()
        }
    }
}

/// `<id>.<secret>`: the token as the kubelet presents it.
impl fmt::Display for BootstrapToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.id, self.secret)
    }
}

/// The id only: the secret stays out of logs.
impl fmt::Debug for BootstrapToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BootstrapToken({}.<secret>)", self.id)
    }
}

/// The [`MACHINE_LABEL`] value for `machine`: its name when it fits a label value (63
/// characters), else `h-` and 32 hex digits of its SHA-256.
pub fn machine_label_value(machine: &str) -> String {
    if machine.len() <= 63 {
        machine.to_owned()
    } else {
        format!("h-{}", &hex::encode(Sha256::digest(machine.as_bytes()))[..32])
    }
}

/// A token Secret read from the cluster that holds a usable token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usable {
    pub token: BootstrapToken,
    /// `None`: it never expires.
    pub expires: Option<Timestamp>,
}

/// Why an existing Secret's token cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unusable {
    #[error("its type is {0:?}, not {SECRET_TYPE:?}")]
    WrongType(String),
    #[error("it has no valid token-id and token-secret")]
    NoToken,
    #[error("usage-bootstrap-authentication is not \"true\"")]
    NotForAuthentication,
    #[error("its expiration {0:?} is not an RFC 3339 time")]
    BadExpiration(String),
    #[error("it expires at {0}, less than an hour from now")]
    Expiring(Timestamp),
}

/// The token in `secret`, if the authenticator accepts it now and for at least
/// [`MIN_REMAINING`] more.
pub fn usable(secret: &Secret, now: Timestamp) -> Result<Usable, Unusable> {
    let type_ = secret.type_.clone().unwrap_or_default();
    if type_ != SECRET_TYPE {
        return Err(Unusable::WrongType(type_));
    }
    let data = secret_data(secret);
    let get = |key: &str| data.get(key).map(String::as_str);
    let token = BootstrapToken::new(get("token-id").unwrap_or(""), get("token-secret").unwrap_or(""))
        .ok_or(Unusable::NoToken)?;
    if get("usage-bootstrap-authentication") != Some("true") {
        return Err(Unusable::NotForAuthentication);
    }
    let expires = match get("expiration") {
        None => None,
        Some(text) => Some(
            text.parse::<Timestamp>()
                .map_err(|_| Unusable::BadExpiration(text.to_owned()))?,
        ),
    };
    if let Some(at) = expires
        && at.duration_since(now) < MIN_REMAINING
    {
        return Err(Unusable::Expiring(at));
    }
    Ok(Usable { token, expires })
}

/// `data` (as the API server returns it) over `stringData` (as it is written), as text.
fn secret_data(secret: &Secret) -> BTreeMap<String, String> {
    let mut out = secret.string_data.clone().unwrap_or_default();
    for (k, v) in secret.data.iter().flatten() {
        out.insert(k.clone(), String::from_utf8_lossy(&v.0).into_owned());
    }
    out
}

/// `len` characters of `[a-z0-9]`, uniformly (bytes ≥ 252 are redrawn).
fn random_chars(len: usize) -> Result<String, getrandom::Error> {
    let mut out = String::with_capacity(len);
    let mut buf = [0u8; 32];
    while out.len() < len {
        getrandom::fill(&mut buf)?;
        for &b in buf.iter().filter(|&&b| b < 252) {
            if out.len() < len {
                out.push(char::from(ALPHABET[usize::from(b % 36)]));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::ByteString;

    use super::*;

    fn now() -> Timestamp {
        "2026-12-01T12:00:00Z".parse().unwrap()
    }

    /// The Secret as the API server returns it: `stringData` moved into `data`.
    fn as_stored(mut secret: Secret) -> Secret {
        let string_data = secret.string_data.take().unwrap_or_default();
        secret.data = Some(
            string_data
                .into_iter()
                .map(|(k, v)| (k, ByteString(v.into_bytes())))
                .collect(),
        );
        secret
    }

    #[test]
    fn generated_tokens_have_the_format_differ_and_hide_the_secret_in_debug() {
        let a = BootstrapToken::generate().unwrap();
        let b = BootstrapToken::generate().unwrap();
        assert_ne!(a, b);
        let text = a.to_string();
        let (id, secret) = text.split_once('.').unwrap();
        assert_eq!(BootstrapToken::new(id, secret), Some(a.clone()));
        assert!(crate::validate::general::bootstrap_token(&text).is_ok(), "{text}");
        assert!(!format!("{a:?}").contains(secret));
    }

    #[test]
    fn a_new_secret_is_what_the_authenticator_reads_labelled_for_the_machine() {
        let token = BootstrapToken::new("abc123", "0123456789abcdef").unwrap();
        let expires = now() + TTL;
        let secret = token.secret_for("m1", expires);
        assert_eq!(secret.metadata.name.as_deref(), Some("bootstrap-token-abc123"));
        assert_eq!(secret.metadata.namespace.as_deref(), Some("kube-system"));
        assert_eq!(secret.type_.as_deref(), Some("bootstrap.kubernetes.io/token"));
        assert_eq!(secret.metadata.labels.as_ref().unwrap()[MACHINE_LABEL], "m1");
        let data = secret.string_data.as_ref().unwrap();
        assert_eq!(data["token-id"], "abc123");
        assert_eq!(data["token-secret"], "0123456789abcdef");
        assert_eq!(data["usage-bootstrap-authentication"], "true");
        assert_eq!(data["usage-bootstrap-signing"], "true");
        assert_eq!(data["auth-extra-groups"], BOOTSTRAP_GROUP);
        assert_eq!(data["expiration"], "2026-12-02T12:00:00Z");
        let read = usable(&as_stored(secret), now()).unwrap();
        assert_eq!(
            read,
            Usable {
                token,
                expires: Some(expires)
            }
        );
    }

    #[test]
    fn tokens_expiring_within_the_hour_wrong_types_and_bad_data_are_not_used() {
        let token = BootstrapToken::new("abc123", "0123456789abcdef").unwrap();
        let soon = now() + SignedDuration::from_mins(59);
        assert_eq!(
            usable(&as_stored(token.secret_for("m1", soon)), now()),
            Err(Unusable::Expiring(soon))
        );
        let later = now() + SignedDuration::from_mins(61);
        assert!(usable(&as_stored(token.secret_for("m1", later)), now()).is_ok());

        let mut opaque = token.secret_for("m1", later);
        opaque.type_ = Some("Opaque".into());
        assert_eq!(usable(&opaque, now()), Err(Unusable::WrongType("Opaque".into())));

        let mut short = token.secret_for("m1", later);
        short
            .string_data
            .as_mut()
            .unwrap()
            .insert("token-secret".into(), "short".into());
        assert_eq!(usable(&short, now()), Err(Unusable::NoToken));

        let mut signing_only = token.secret_for("m1", later);
        signing_only
            .string_data
            .as_mut()
            .unwrap()
            .remove("usage-bootstrap-authentication");
        assert_eq!(usable(&signing_only, now()), Err(Unusable::NotForAuthentication));

        let mut forever = token.secret_for("m1", later);
        forever.string_data.as_mut().unwrap().remove("expiration");
        assert_eq!(usable(&forever, now()).unwrap().expires, None);
    }

    #[test]
    fn long_machine_names_get_a_hashed_label_value_that_fits() {
        let long = format!("{}.example.com", "a".repeat(60));
        let value = machine_label_value(&long);
        assert_eq!(value.len(), 34, "{value}");
        assert!(crate::validate::general::label_value(&value).is_ok());
        assert_ne!(machine_label_value(&format!("b{long}")), value);
        assert_eq!(machine_label_value("m1"), "m1");
    }
}
