//! A kubeconfig the agent writes (the kubelet's bootstrap one, the daemon's), built as `kube`'s
//! typed [`Kubeconfig`]: one cluster, one user, one context, the current one.

use kube::config::{AuthInfo, Cluster, Context, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext};

/// How the cluster's CA is given.
pub enum CaSource<'a> {
    /// A file on the node (`certificate-authority`).
    File(&'a str),
    /// The PEM, base64-encoded (`certificate-authority-data`).
    Data(&'a str),
}

/// The kubeconfig naming `cluster` at `server` with its CA, `user` with `auth`, and their
/// context `context` (the current one), as YAML.
pub fn yaml(
    cluster: &str,
    server: &str,
    ca: CaSource<'_>,
    user: &str,
    auth: AuthInfo,
    context: &str,
) -> String {
    let (certificate_authority, certificate_authority_data) = match ca {
        CaSource::File(path) => (Some(path.to_owned()), None),
        CaSource::Data(data) => (None, Some(data.to_owned())),
    };
    let config = Kubeconfig {
        api_version: Some("v1".into()),
        kind: Some("Config".into()),
        clusters: vec![NamedCluster {
            name: cluster.to_owned(),
            cluster: Some(Cluster {
                server: Some(server.to_owned()),
                certificate_authority,
                certificate_authority_data,
                ..Cluster::default()
            }),
            ..NamedCluster::default()
        }],
        auth_infos: vec![NamedAuthInfo {
            name: user.to_owned(),
            auth_info: Some(auth),
            ..NamedAuthInfo::default()
        }],
        contexts: vec![NamedContext {
            name: context.to_owned(),
            context: Some(Context {
                cluster: cluster.to_owned(),
                user: Some(user.to_owned()),
                ..Context::default()
            }),
            ..NamedContext::default()
        }],
        current_context: Some(context.to_owned()),
        ..Kubeconfig::default()
    };
    serde_yaml_ng::to_string(&config).expect("a Kubeconfig serialises as YAML")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_reads_back_what_is_written_with_either_ca_and_the_current_context() {
        let auth = AuthInfo {
            token_file: Some("/var/lib/t".into()),
            ..AuthInfo::default()
        };
        let text = yaml(
            "c",
            "https://10.0.0.1:6443",
            CaSource::Data("QUJD"),
            "u",
            auth,
            "ctx",
        );
        let back: Kubeconfig = serde_yaml_ng::from_str(&text).unwrap();
        assert_eq!(back.current_context.as_deref(), Some("ctx"));
        let cluster = back.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.certificate_authority_data.as_deref(), Some("QUJD"));
        assert_eq!(cluster.server.as_deref(), Some("https://10.0.0.1:6443"));
        assert_eq!(
            back.auth_infos[0]
                .auth_info
                .as_ref()
                .unwrap()
                .token_file
                .as_deref(),
            Some("/var/lib/t")
        );
        assert!(text.contains("tokenFile: /var/lib/t"), "{text}");
        let text = yaml(
            "c",
            "https://s",
            CaSource::File("/etc/ca.crt"),
            "u",
            AuthInfo::default(),
            "ctx",
        );
        assert!(text.contains("certificate-authority: /etc/ca.crt"), "{text}");
        assert!(!text.contains("certificate-authority-data"), "{text}");
    }
}
