//! A bootstrap token, its Secret, and the bootstrap RBAC kubeadm creates, so a
//! kubelet holding only the token gets a client certificate through
//! kube-controller-manager's CSR approval and signing (TLS bootstrapping).

use serde_json::json;

/// The namespace bootstrap token Secrets live in.
pub use agent::manual_bootstrap::token::NAMESPACE as TOKEN_NAMESPACE;
/// The Secret type the bootstrap authenticator reads.
pub use agent::manual_bootstrap::token::SECRET_TYPE as TOKEN_SECRET_TYPE;
/// The token type is the agent's (`kubectl-unbounded machine manual-bootstrap` makes them too).
pub use agent::manual_bootstrap::token::{BOOTSTRAP_GROUP, BootstrapToken, NotAToken};

/// The Secret the API server's bootstrap authenticator accepts `token` by (no expiration: the
/// lab lives as long as it runs; the agent's `secret_for` is the expiring one made for a Machine).
pub fn secret_manifest(token: &BootstrapToken) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": { "name": token.secret_name(), "namespace": TOKEN_NAMESPACE },
        "type": TOKEN_SECRET_TYPE,
        "stringData": {
            "description": "lab node bootstrap token (written by the harness)",
            "token-id": token.id(),
            "token-secret": token.secret(),
            "usage-bootstrap-authentication": "true",
            "usage-bootstrap-signing": "true",
            "auth-extra-groups": BOOTSTRAP_GROUP,
        },
    })
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
        let yaml = to_yaml_stream(&[secret_manifest(&token)]).unwrap();
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
