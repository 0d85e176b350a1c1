//! A ServiceAccount token (a JWT) as the daemon reads it, without verifying its signature (the
//! API server does): whose it is (`sub`), when it was issued and when it expires, and when the
//! daemon renews it — at 80 % of its life, as kubelet renews projected tokens.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// The prefix of a ServiceAccount's user name (`system:serviceaccount:<namespace>:<name>`).
const SUBJECT_PREFIX: &str = "system:serviceaccount:";

/// What is read from a token's payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// `sub`: `system:serviceaccount:<namespace>:<name>`.
    pub subject: String,
    /// `iat`, seconds since the epoch.
    pub issued_at: i64,
    /// `exp`, seconds since the epoch.
    pub expires_at: i64,
}

/// A token that is not a ServiceAccount token the daemon can use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("is not a JWT (three base64url parts separated by dots)")]
    NotJwt,
    #[error("has a payload that is not base64url-encoded JSON: {0}")]
    Payload(String),
    #[error("has no numeric `{0}` claim")]
    MissingClaim(&'static str),
    #[error("expires ({expires_at}) before it was issued ({issued_at})")]
    Backwards { issued_at: i64, expires_at: i64 },
    #[error("belongs to {0:?}, not to a ServiceAccount (system:serviceaccount:<namespace>:<name>)")]
    NotServiceAccount(String),
}

/// The claims of `token` (surrounding whitespace ignored).
pub fn claims(token: &str) -> Result<Claims, TokenError> {
    let parts: Vec<&str> = token.trim().split('.').collect();
    let [header, payload, signature] = parts.as_slice() else {
        return Err(TokenError::NotJwt);
    };
    if [header, payload, signature].iter().any(|p| p.is_empty()) {
        return Err(TokenError::NotJwt);
    }
    let bytes = URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .map_err(|e| TokenError::Payload(e.to_string()))?;
    let json: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| TokenError::Payload(e.to_string()))?;
    let number = |name: &'static str| {
        json.get(name)
            .and_then(|v| v.as_i64())
            .ok_or(TokenError::MissingClaim(name))
    };
    let claims = Claims {
        subject: json
            .get("sub")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned(),
        issued_at: number("iat")?,
        expires_at: number("exp")?,
    };
    if claims.expires_at <= claims.issued_at {
        return Err(TokenError::Backwards {
            issued_at: claims.issued_at,
            expires_at: claims.expires_at,
        });
    }
    claims.service_account()?;
    Ok(claims)
}

impl Claims {
    /// The ServiceAccount's namespace and name.
    pub fn service_account(&self) -> Result<(&str, &str), TokenError> {
        self.subject
            .strip_prefix(SUBJECT_PREFIX)
            .and_then(|rest| rest.split_once(':'))
            .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains(':'))
            .ok_or_else(|| TokenError::NotServiceAccount(self.subject.clone()))
    }

    /// Its lifetime in seconds.
    pub fn lifetime_secs(&self) -> i64 {
        self.expires_at - self.issued_at
    }

    /// When the daemon renews it: 80 % into its life.
    pub fn renew_at(&self) -> i64 {
        self.issued_at + self.lifetime_secs() * 4 / 5
    }
}

/// The user name of `namespace/name`'s ServiceAccount.
pub fn subject(namespace: &str, name: &str) -> String {
    format!("{SUBJECT_PREFIX}{namespace}:{name}")
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use rstest::rstest;

    /// An unsigned token with `payload` (tests only: the daemon never checks signatures).
    pub fn jwt(payload: serde_json::Value) -> String {
        let enc = |v: &[u8]| URL_SAFE_NO_PAD.encode(v);
        format!(
            "{}.{}.{}",
            enc(br#"{"alg":"RS256"}"#),
            enc(payload.to_string().as_bytes()),
            enc(b"signature")
        )
    }

    #[test]
    fn a_service_account_token_gives_its_account_and_renewal_time() {
        let token = jwt(serde_json::json!({
            "sub": "system:serviceaccount:unbounded-system:agent-m1",
            "iat": 1_000,
            "exp": 1_000 + 86_400,
        }));
        let c = claims(&format!("  {token}\n")).unwrap();
        assert_eq!(c.service_account().unwrap(), ("unbounded-system", "agent-m1"));
        assert_eq!(c.lifetime_secs(), 86_400);
        assert_eq!(c.renew_at(), 1_000 + 69_120);
        assert_eq!(subject("unbounded-system", "agent-m1"), c.subject);
    }

    #[rstest]
    #[case::two_parts("a.b", "is not a JWT")]
    #[case::empty_part("a..c", "is not a JWT")]
    #[case::not_base64("a.!!!.c", "payload that is not base64url")]
    #[case::not_json(&format!("a.{}.c", URL_SAFE_NO_PAD.encode("x")), "payload that is not base64url-encoded JSON")]
    #[case::no_exp(&jwt(serde_json::json!({"sub": "system:serviceaccount:a:b", "iat": 1})), "no numeric `exp`")]
    #[case::backwards(&jwt(serde_json::json!({"sub": "system:serviceaccount:a:b", "iat": 5, "exp": 5})), "expires (5) before")]
    #[case::user(&jwt(serde_json::json!({"sub": "kubernetes-admin", "iat": 1, "exp": 2})), "belongs to \"kubernetes-admin\"")]
    #[case::no_name(&jwt(serde_json::json!({"sub": "system:serviceaccount:a:", "iat": 1, "exp": 2})), "not to a ServiceAccount")]
    fn what_is_not_a_service_account_token_is_named(#[case] token: &str, #[case] wanted: &str) {
        let err = claims(token).unwrap_err().to_string();
        assert!(err.contains(wanted), "{err}");
    }
}
