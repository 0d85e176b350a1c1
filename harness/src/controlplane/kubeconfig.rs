//! A kubeconfig (YAML, `kind: Config`) with one cluster, one user and one context, as kube's
//! [`Kubeconfig`] type, and a copy of one naming another API server.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use kube::config::{
    AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext, Preferences,
};

/// How the user authenticates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credentials {
    /// A client certificate and its key, both PEM (embedded as `client-*-data`).
    ClientCert { cert_pem: String, key_pem: String },
    /// A bearer token (a bootstrap token `<id>.<secret>`).
    Token(String),
}

/// The inputs of one kubeconfig.
#[derive(Clone, Debug)]
pub struct KubeconfigSpec {
    /// The cluster's name (`lab`).
    pub cluster: String,
    /// The API server's URL (`https://192.168.100.3:6443`).
    pub server: String,
    /// The cluster CA, PEM (embedded as `certificate-authority-data`).
    pub ca_pem: String,
    /// The user's name (`kubernetes-admin`).
    pub user: String,
    pub credentials: Credentials,
}

/// A kubeconfig that cannot be given another server.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("it names no cluster")]
    NoCluster,
    #[error("its cluster {0:?} has no `cluster` entry")]
    EmptyCluster(String),
}

impl KubeconfigSpec {
    /// The context's name, `<user>@<cluster>` as kubeadm names it.
    pub fn context_name(&self) -> String {
        format!("{}@{}", self.user, self.cluster)
    }

    /// The kubeconfig: the cluster with its server and embedded CA, the user, their context
    /// (the current one), `preferences: {}`.
    pub fn to_kubeconfig(&self) -> Kubeconfig {
        let context = self.context_name();
        let user = match &self.credentials {
            Credentials::ClientCert { cert_pem, key_pem } => AuthInfo {
                client_certificate_data: Some(STANDARD.encode(cert_pem)),
                client_key_data: Some(STANDARD.encode(key_pem).into()),
                ..AuthInfo::default()
            },
            Credentials::Token(token) => AuthInfo {
                token: Some(token.clone().into()),
                ..AuthInfo::default()
            },
        };
        Kubeconfig {
            api_version: Some("v1".into()),
            kind: Some("Config".into()),
            clusters: vec![NamedCluster {
                name: self.cluster.clone(),
                cluster: Some(Cluster {
                    certificate_authority_data: Some(STANDARD.encode(&self.ca_pem)),
                    server: Some(self.server.clone()),
                    ..Cluster::default()
                }),
                ..NamedCluster::default()
            }],
            auth_infos: vec![NamedAuthInfo {
                name: self.user.clone(),
                auth_info: Some(user),
                ..NamedAuthInfo::default()
            }],
            contexts: vec![NamedContext {
                name: context.clone(),
                context: Some(Context {
                    cluster: self.cluster.clone(),
                    user: Some(self.user.clone()),
                    ..Context::default()
                }),
                ..NamedContext::default()
            }],
            current_context: Some(context),
            preferences: Some(Preferences::default()),
            ..Kubeconfig::default()
        }
    }

    /// The kubeconfig as YAML.
    pub fn to_yaml(&self) -> Result<String, serde_yaml_ng::Error> {
        serde_yaml_ng::to_string(&self.to_kubeconfig())
    }
}

/// `config` with its (first) cluster's server set to `server_url`; everything else is kept.
pub fn with_server(mut config: Kubeconfig, server_url: &str) -> Result<Kubeconfig, ServerError> {
    let named = config.clusters.first_mut().ok_or(ServerError::NoCluster)?;
    let cluster = named
        .cluster
        .as_mut()
        .ok_or_else(|| ServerError::EmptyCluster(named.name.clone()))?;
    cluster.server = Some(server_url.to_owned());
    Ok(config)
}

#[cfg(test)]
mod tests {
    use kube::config::KubeConfigOptions;

    use super::*;

    const CA: &str = "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n";

    fn spec(credentials: Credentials) -> KubeconfigSpec {
        KubeconfigSpec {
            cluster: "lab".into(),
            server: "https://192.168.101.1:6443".into(),
            ca_pem: CA.into(),
            user: "kubelet-bootstrap".into(),
            credentials,
        }
    }

    fn token_spec() -> KubeconfigSpec {
        spec(Credentials::Token("abcdef.0123456789abcdef".into()))
    }

    fn cert_spec() -> KubeconfigSpec {
        spec(Credentials::ClientCert {
            cert_pem: "-----BEGIN CERTIFICATE-----\nBB==\n-----END CERTIFICATE-----\n".into(),
            key_pem: "-----BEGIN PRIVATE KEY-----\nCC==\n-----END PRIVATE KEY-----\n".into(),
        })
    }

    /// YAML as plain data (maps compare whatever their key order).
    fn data(yaml: &str) -> serde_json::Value {
        serde_yaml_ng::from_str(yaml).unwrap()
    }

    /// What the lab's kubeconfigs held before they were written with kube's type (kubectl reads
    /// them): these keys and values, nothing else.
    fn written_before(user: serde_json::Value) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{
                "name": "lab",
                "cluster": {
                    "certificate-authority-data": STANDARD.encode(CA),
                    "server": "https://192.168.101.1:6443",
                },
            }],
            "users": [{ "name": "kubelet-bootstrap", "user": user }],
            "contexts": [{
                "name": "kubelet-bootstrap@lab",
                "context": { "cluster": "lab", "user": "kubelet-bootstrap" },
            }],
            "current-context": "kubelet-bootstrap@lab",
            "preferences": {},
        })
    }

    #[test]
    fn token_kubeconfig_holds_what_it_held_before() {
        let yaml = token_spec().to_yaml().unwrap();
        let user = serde_json::json!({ "token": "abcdef.0123456789abcdef" });
        assert_eq!(data(&yaml), written_before(user), "{yaml}");
    }

    #[test]
    fn client_cert_kubeconfig_holds_what_it_held_before() {
        let yaml = cert_spec().to_yaml().unwrap();
        let user = serde_json::json!({
            "client-certificate-data": STANDARD.encode("-----BEGIN CERTIFICATE-----\nBB==\n-----END CERTIFICATE-----\n"),
            "client-key-data": STANDARD.encode("-----BEGIN PRIVATE KEY-----\nCC==\n-----END PRIVATE KEY-----\n"),
        });
        assert_eq!(data(&yaml), written_before(user), "{yaml}");
    }

    #[test]
    fn written_yaml_reads_back_as_the_same_kubeconfig() {
        for spec in [token_spec(), cert_spec()] {
            let yaml = spec.to_yaml().unwrap();
            let read = Kubeconfig::from_yaml(&yaml).unwrap();
            // Compared as YAML data: kube's types do not compare (secrets are hidden).
            assert_eq!(
                data(&serde_yaml_ng::to_string(&read).unwrap()),
                data(&yaml),
                "{yaml}"
            );
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn kube_resolves_the_current_context_to_the_server_and_user() {
        let config =
            kube::Config::from_custom_kubeconfig(token_spec().to_kubeconfig(), &KubeConfigOptions::default())
                .await
                .unwrap();
        assert_eq!(config.cluster_url.to_string(), "https://192.168.101.1:6443/");
        assert_eq!(config.root_cert.as_ref().map(Vec::len), Some(1));
        // The token is a secret string: read through its serialized form.
        let user = serde_json::to_value(&config.auth_info).unwrap();
        assert_eq!(user["token"], "abcdef.0123456789abcdef");
    }

    #[test]
    fn another_server_changes_only_the_server() {
        let before = cert_spec().to_kubeconfig();
        let after = with_server(before.clone(), "https://127.0.0.1:16443").unwrap();
        let (mut before, after) = (
            data(&serde_yaml_ng::to_string(&before).unwrap()),
            data(&serde_yaml_ng::to_string(&after).unwrap()),
        );
        before["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:16443".into();
        assert_eq!(after, before);
    }

    #[test]
    fn another_server_needs_a_cluster() {
        let err = with_server(Kubeconfig::default(), "https://127.0.0.1:16443").unwrap_err();
        assert!(matches!(err, ServerError::NoCluster), "{err}");
        let mut config = cert_spec().to_kubeconfig();
        config.clusters[0].cluster = None;
        let err = with_server(config, "https://127.0.0.1:16443").unwrap_err();
        assert!(err.to_string().contains("\"lab\""), "{err}");
    }
}
