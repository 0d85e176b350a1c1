//! A bootstrap token, its Secret, and the bootstrap RBAC kubeadm creates, so a
//! kubelet holding only the token gets a client certificate through
//! kube-controller-manager's CSR approval and signing (TLS bootstrapping).

use std::fmt;

use serde_json::json;

/// The group bootstrap tokens add their holders to (kubeadm's default).
pub const BOOTSTRAP_GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";
/// The namespace bootstrap token Secrets live in.
pub const TOKEN_NAMESPACE: &str = "kube-system";
/// The Secret type the bootstrap authenticator reads.
pub const TOKEN_SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";

const ALPHABET: &[u8; 36] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// A bootstrap token `<id>.<secret>`: 6 and 16 characters of `[a-z0-9]`.
#[derive(Clone, PartialEq, Eq)]
pub struct BootstrapToken {
    id: String,
    secret: String,
}

/// A string that is not a bootstrap token.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0:?} is not a bootstrap token: expected <6 of [a-z0-9]>.<16 of [a-z0-9]>")]
pub struct NotAToken(String);

impl BootstrapToken {
    /// A new random token (from the OS random source).
    pub fn generate() -> Result<BootstrapToken, getrandom::Error> {
        Ok(BootstrapToken {
            id: random_chars(6)?,
            secret: random_chars(16)?,
        })
    }

    /// Parses `<id>.<secret>`, refusing anything else.
    pub fn parse(text: &str) -> Result<BootstrapToken, NotAToken> {
        let ok = |part: &str, len: usize| {
            part.len() == len && part.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        };
        match text.split_once('.') {
            Some((id, secret)) if ok(id, 6) && ok(secret, 16) => Ok(BootstrapToken {
                id: id.to_string(),
                secret: secret.to_string(),
            }),
            _ => Err(NotAToken(text.to_string())),
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// The Secret's name, `bootstrap-token-<id>`.
    pub fn secret_name(&self) -> String {
        format!("bootstrap-token-{}", self.id)
    }

    /// The Secret the API server's bootstrap authenticator accepts this token by
    /// (no expiration: the lab lives as long as it runs).
    pub fn secret_manifest(&self) -> serde_json::Value {
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": { "name": self.secret_name(), "namespace": TOKEN_NAMESPACE },
            "type": TOKEN_SECRET_TYPE,
            "stringData": {
                "description": "lab node bootstrap token (written by the harness)",
                "token-id": self.id,
                "token-secret": self.secret,
                "usage-bootstrap-authentication": "true",
                "usage-bootstrap-signing": "true",
                "auth-extra-groups": BOOTSTRAP_GROUP,
            },
        })
    }
}

/// `<id>.<secret>`: the token itself, as a kubelet presents it.
impl fmt::Display for BootstrapToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.id, self.secret)
    }
}

/// Shows the id only: the secret stays out of logs.
impl fmt::Debug for BootstrapToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BootstrapToken({}.<secret>)", self.id)
    }
}

/// `len` characters of `[a-z0-9]`, uniformly (bytes ≥ 252 are redrawn).
fn random_chars(len: usize) -> Result<String, getrandom::Error> {
    let mut out = String::with_capacity(len);
    let mut buf = [0u8; 32];
    while out.len() < len {
        getrandom::fill(&mut buf)?;
        for &b in buf.iter().filter(|&&b| b < 252) {
            if out.len() < len {
                out.push(ALPHABET[usize::from(b % 36)] as char);
            }
        }
    }
    Ok(out)
}

/// The ClusterRoleBindings kubeadm creates for TLS bootstrapping:
/// * `kubeadm:kubelet-bootstrap`: the bootstrappers may create CSRs (`system:node-bootstrapper`);
/// * `kubeadm:node-autoapprove-bootstrap`: their node-client CSRs are approved automatically;
/// * `kubeadm:node-autoapprove-certificate-rotation`: nodes' renewals of their own client
///   certificates are approved automatically.
pub fn rbac_manifests() -> Vec<serde_json::Value> {
    let binding = |name: &str, role: &str, group: &str| {
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": { "name": name },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role },
            "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group }],
        })
    };
    vec![
        binding(
            "kubeadm:kubelet-bootstrap",
            "system:node-bootstrapper",
            BOOTSTRAP_GROUP,
        ),
        binding(
            "kubeadm:node-autoapprove-bootstrap",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            BOOTSTRAP_GROUP,
        ),
        binding(
            "kubeadm:node-autoapprove-certificate-rotation",
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            "system:nodes",
        ),
    ]
}

/// The user the cluster DNS authenticates as (client certificate CN).
pub const COREDNS_USER: &str = "system:coredns";

/// kubeadm's `system:coredns` ClusterRole (what CoreDNS's `kubernetes` plugin reads),
/// bound to the user [`COREDNS_USER`].
pub fn coredns_rbac_manifests() -> Vec<serde_json::Value> {
    vec![
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": { "name": "system:coredns" },
            "rules": [
                { "apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"],
                  "verbs": ["list", "watch"] },
                { "apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                  "verbs": ["list", "watch"] },
            ],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": { "name": "system:coredns" },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns" },
            "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": COREDNS_USER }],
        }),
    ]
}

/// Several manifests as one multi-document YAML stream.
pub fn to_yaml_stream(docs: &[serde_json::Value]) -> Result<String, serde_yaml_ng::Error> {
    let mut out = String::new();
    for doc in docs {
        out.push_str("---\n");
        out.push_str(&serde_yaml_ng::to_string(doc)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[test]
    fn generated_tokens_have_the_bootstrap_format_and_differ() {
        let a = BootstrapToken::generate().unwrap();
        let b = BootstrapToken::generate().unwrap();
        for token in [&a, &b] {
            let text = token.to_string();
            assert_eq!(BootstrapToken::parse(&text).as_ref(), Ok(token), "{text}");
            assert_eq!((token.id().len(), token.secret().len()), (6, 16));
        }
        assert_ne!(a, b);
        assert!(!format!("{a:?}").contains(a.secret()), "Debug shows the secret");
    }

    #[test]
    fn malformed_tokens_are_refused() {
        for bad in [
            "abcdef0123456789abcdef",
            "ABCDEF.0123456789abcdef",
            "abcde.0123456789abcdef",
            "abcdef.0123456789abcde-",
            "",
        ] {
            assert_eq!(
                BootstrapToken::parse(bad),
                Err(NotAToken(bad.to_string())),
                "{bad}"
            );
        }
    }

    #[test]
    fn secret_manifest_is_the_one_the_bootstrap_authenticator_reads() {
        let token = BootstrapToken::parse("07401b.f395accd246ae52d").unwrap();
        let yaml = to_yaml_stream(&[token.secret_manifest()]).unwrap();
        let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&yaml).unwrap();
        assert_eq!(doc["metadata"]["name"].as_str(), Some("bootstrap-token-07401b"));
        assert_eq!(doc["metadata"]["namespace"].as_str(), Some("kube-system"));
        assert_eq!(doc["type"].as_str(), Some("bootstrap.kubernetes.io/token"));
        let data = &doc["stringData"];
        assert_eq!(data["token-id"].as_str(), Some("07401b"));
        assert_eq!(data["token-secret"].as_str(), Some("f395accd246ae52d"));
        assert_eq!(data["usage-bootstrap-authentication"].as_str(), Some("true"));
        assert_eq!(data["usage-bootstrap-signing"].as_str(), Some("true"));
        assert_eq!(data["auth-extra-groups"].as_str(), Some(BOOTSTRAP_GROUP));
    }

    #[test]
    fn rbac_binds_bootstrappers_and_nodes_to_the_csr_roles() {
        let yaml = to_yaml_stream(&rbac_manifests()).unwrap();
        let docs: Vec<serde_yaml_ng::Value> = serde_yaml_ng::Deserializer::from_str(&yaml)
            .map(|d| serde_yaml_ng::Value::deserialize(d).unwrap())
            .collect();
        let bindings: Vec<(&str, &str, &str)> = docs
            .iter()
            .map(|d| {
                assert_eq!(d["kind"].as_str(), Some("ClusterRoleBinding"));
                assert_eq!(d["subjects"][0]["kind"].as_str(), Some("Group"));
                (
                    d["metadata"]["name"].as_str().unwrap(),
                    d["roleRef"]["name"].as_str().unwrap(),
                    d["subjects"][0]["name"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            bindings,
            [
                (
                    "kubeadm:kubelet-bootstrap",
                    "system:node-bootstrapper",
                    BOOTSTRAP_GROUP
                ),
                (
                    "kubeadm:node-autoapprove-bootstrap",
                    "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
                    BOOTSTRAP_GROUP
                ),
                (
                    "kubeadm:node-autoapprove-certificate-rotation",
                    "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
                    "system:nodes"
                ),
            ]
        );
    }
}
