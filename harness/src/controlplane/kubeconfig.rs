//! A kubeconfig (YAML, `kind: Config`) with one cluster, one user and one context.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

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
pub struct Kubeconfig {
    /// The cluster's name (`lab`).
    pub cluster: String,
    /// The API server's URL (`https://192.168.100.1:6443`).
    pub server: String,
    /// The cluster CA, PEM (embedded as `certificate-authority-data`).
    pub ca_pem: String,
    /// The user's name (`kubernetes-admin`).
    pub user: String,
    pub credentials: Credentials,
}

#[derive(serde::Serialize)]
struct Config<'a> {
    #[serde(rename = "apiVersion")]
    api_version: &'a str,
    kind: &'a str,
    clusters: [Named<'a, Cluster>; 1],
    users: [Named<'a, User>; 1],
    contexts: [Named<'a, Context<'a>>; 1],
    #[serde(rename = "current-context")]
    current_context: &'a str,
    preferences: std::collections::BTreeMap<String, String>,
}

#[derive(serde::Serialize)]
struct Named<'a, T> {
    name: &'a str,
    #[serde(flatten)]
    value: T,
}

#[derive(serde::Serialize)]
struct Cluster {
    cluster: ClusterData,
}

#[derive(serde::Serialize)]
struct ClusterData {
    #[serde(rename = "certificate-authority-data")]
    certificate_authority_data: String,
    server: String,
}

#[derive(serde::Serialize)]
struct User {
    user: UserData,
}

#[derive(serde::Serialize)]
#[serde(untagged)]
enum UserData {
    Cert {
        #[serde(rename = "client-certificate-data")]
        client_certificate_data: String,
        #[serde(rename = "client-key-data")]
        client_key_data: String,
    },
    Token {
        token: String,
    },
}

#[derive(serde::Serialize)]
struct Context<'a> {
    context: ContextData<'a>,
}

#[derive(serde::Serialize)]
struct ContextData<'a> {
    cluster: &'a str,
    user: &'a str,
}

impl Kubeconfig {
    /// The context's name, `<user>@<cluster>` as kubeadm names it.
    pub fn context_name(&self) -> String {
        format!("{}@{}", self.user, self.cluster)
    }

    /// The kubeconfig as YAML.
    pub fn to_yaml(&self) -> Result<String, serde_yaml_ng::Error> {
        let context = self.context_name();
        let user = match &self.credentials {
            Credentials::ClientCert { cert_pem, key_pem } => UserData::Cert {
                client_certificate_data: STANDARD.encode(cert_pem),
                client_key_data: STANDARD.encode(key_pem),
            },
            Credentials::Token(token) => UserData::Token { token: token.clone() },
        };
        serde_yaml_ng::to_string(&Config {
            api_version: "v1",
            kind: "Config",
            clusters: [Named {
                name: &self.cluster,
                value: Cluster {
                    cluster: ClusterData {
                        certificate_authority_data: STANDARD.encode(&self.ca_pem),
                        server: self.server.clone(),
                    },
                },
            }],
            users: [Named {
                name: &self.user,
                value: User { user },
            }],
            contexts: [Named {
                name: &context,
                value: Context {
                    context: ContextData {
                        cluster: &self.cluster,
                        user: &self.user,
                    },
                },
            }],
            current_context: &context,
            preferences: Default::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(yaml: &str, path: &[&str]) -> serde_yaml_ng::Value {
        let mut v: serde_yaml_ng::Value = serde_yaml_ng::from_str(yaml).unwrap();
        for key in path {
            v = match key.parse::<usize>() {
                Ok(i) => v[i].clone(),
                Err(_) => v[*key].clone(),
            };
        }
        v
    }

    #[test]
    fn token_kubeconfig_names_cluster_user_and_context() {
        let yaml = Kubeconfig {
            cluster: "lab".into(),
            server: "https://192.168.101.1:6443".into(),
            ca_pem: "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n".into(),
            user: "kubelet-bootstrap".into(),
            credentials: Credentials::Token("abcdef.0123456789abcdef".into()),
        }
        .to_yaml()
        .unwrap();
        assert_eq!(value(&yaml, &["kind"]).as_str(), Some("Config"));
        assert_eq!(
            value(&yaml, &["current-context"]).as_str(),
            Some("kubelet-bootstrap@lab")
        );
        assert_eq!(
            value(&yaml, &["clusters", "0", "cluster", "server"]).as_str(),
            Some("https://192.168.101.1:6443")
        );
        assert_eq!(
            value(&yaml, &["users", "0", "user", "token"]).as_str(),
            Some("abcdef.0123456789abcdef")
        );
        assert!(value(&yaml, &["users", "0", "user", "client-key-data"]).is_null());
        let ca = value(&yaml, &["clusters", "0", "cluster", "certificate-authority-data"]);
        let ca = STANDARD.decode(ca.as_str().unwrap()).unwrap();
        assert!(
            String::from_utf8(ca)
                .unwrap()
                .starts_with("-----BEGIN CERTIFICATE-----")
        );
    }
}
