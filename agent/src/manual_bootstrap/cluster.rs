//! The reads from the cluster the kubeconfig names (as kubectl would pick it): the API server
//! and its CA, the Machine, its configuration's template, the cluster DNS address and the
//! server's version. Every failure names the API server.

use crate::error_chain::chain;
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Service;
use kube::api::Api;

use crate::machina::machine_configuration_version::version_object_name;
use crate::machina::{
    Machine, MachineConfiguration, MachineConfigurationTemplate, MachineConfigurationVersion,
};

use super::error::ManualBootstrapError;

/// The cluster's facts the agent config needs besides the Machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterFacts {
    /// The API server URL from the kubeconfig (`Kubelet.ApiServer`).
    pub api_server: String,
    /// The cluster CA, PEM (`Cluster.CaCertBase64` once encoded).
    pub ca_pem: String,
    /// The `kube-dns` Service's cluster IP (`Cluster.ClusterDNS`).
    pub cluster_dns: String,
    /// The API server's version (`Cluster.Version` when neither Machine nor configuration has one).
    pub server_version: String,
}

/// A client for the kubeconfig's cluster, with the server URL and CA it was made from.
pub struct Cluster {
    pub client: kube::Client,
    pub server: String,
    ca_pem: String,
}

impl Cluster {
    /// Loads the kubeconfig as kubectl would (`KUBECONFIG`, `~/.kube/config`, in-cluster) and
    /// makes a client; nothing is sent yet.
    pub async fn connect() -> Result<Cluster, ManualBootstrapError> {
        let mut config = kube::Config::infer()
            .await
            .map_err(|e| ManualBootstrapError::Kubeconfig(chain(&e)))?;
        config.connect_timeout = Some(Duration::from_secs(10));
        config.read_timeout = Some(Duration::from_secs(30));
        let server = config.cluster_url.to_string().trim_end_matches('/').to_owned();
        let ca_pem = ca_pem(&config).ok_or_else(|| ManualBootstrapError::NoClusterCa {
            server: server.clone(),
        })?;
        let client =
            kube::Client::try_from(config).map_err(|e| ManualBootstrapError::Kubeconfig(chain(&e)))?;
        Ok(Cluster {
            client,
            server,
            ca_pem,
        })
    }

    /// Maps a failed request for `what`: a refusal names the server's message, anything else
    /// means the server was not reached.
    pub fn error(&self, what: &str, err: kube::Error) -> ManualBootstrapError {
        match err {
            kube::Error::Api(status) => ManualBootstrapError::Api {
                what: what.to_owned(),
                server: self.server.clone(),
                message: status.message.clone(),
            },
            other => ManualBootstrapError::Unreachable {
                server: self.server.clone(),
                message: chain(&other),
            },
        }
    }

    /// The Machine `name`.
    pub async fn machine(&self, name: &str) -> Result<Machine, ManualBootstrapError> {
        Api::<Machine>::all(self.client.clone())
            .get_opt(name)
            .await
            .map_err(|e| self.error(&format!("reading machine {name:?}"), e))?
            .ok_or_else(|| ManualBootstrapError::MachineNotFound(name.to_owned()))
    }

    /// The template `machine` follows: the MachineConfigurationVersion `<cfg>-v<N>` when its
    /// `configurationRef` names a version, else the MachineConfiguration's own; `None` without
    /// a `configurationRef`.
    pub async fn template_for(
        &self,
        machine: &Machine,
    ) -> Result<Option<MachineConfigurationTemplate>, ManualBootstrapError> {
        let Some(reference) = &machine.spec.configuration_ref else {
            return Ok(None);
        };
        let machine_name = machine.metadata.name.clone().unwrap_or_default();
        let not_found = |kind, name: String| ManualBootstrapError::ConfigurationNotFound {
            kind,
            name,
            machine: machine_name.clone(),
        };
        if let Some(version) = reference.version {
            let name = version_object_name(&reference.name, version);
            let found = Api::<MachineConfigurationVersion>::all(self.client.clone())
                .get_opt(&name)
                .await
                .map_err(|e| self.error(&format!("reading machineconfigurationversion {name:?}"), e))?
                .ok_or_else(|| not_found("machineconfigurationversion", name))?;
            return Ok(Some(found.spec.template));
        }
        let name = &reference.name;
        let found = Api::<MachineConfiguration>::all(self.client.clone())
            .get_opt(name)
            .await
            .map_err(|e| self.error(&format!("reading machineconfiguration {name:?}"), e))?
            .ok_or_else(|| not_found("machineconfiguration", name.clone()))?;
        Ok(Some(found.spec.template))
    }

    /// The API server, CA, cluster DNS address and server version.
    pub async fn facts(&self) -> Result<ClusterFacts, ManualBootstrapError> {
        let service = Api::<Service>::namespaced(self.client.clone(), "kube-system")
            .get_opt("kube-dns")
            .await
            .map_err(|e| self.error("reading service kube-system/kube-dns", e))?
            .ok_or_else(|| {
                ManualBootstrapError::ClusterDns("service kube-dns not found in kube-system".into())
            })?;
        let cluster_dns = service
            .spec
            .and_then(|s| s.cluster_ip)
            .filter(|ip| !ip.is_empty() && ip != "None")
            .ok_or_else(|| {
                ManualBootstrapError::ClusterDns("service kube-system/kube-dns has no cluster IP".into())
            })?;
        let version = self
            .client
            .apiserver_version()
            .await
            .map_err(|e| self.error("reading the server version", e))?;
        Ok(ClusterFacts {
            api_server: self.server.clone(),
            ca_pem: self.ca_pem.clone(),
            cluster_dns,
            server_version: release_version(&version.git_version),
        })
    }
}

/// `v1.35.4` of `v1.35.4+k3s1` (build metadata is no Kubernetes release).
fn release_version(git_version: &str) -> String {
    git_version.split('+').next().unwrap_or(git_version).to_owned()
}

/// The cluster CA as PEM: the kubeconfig's certificates (DER), or the in-cluster CA file.
fn ca_pem(config: &kube::Config) -> Option<String> {
    if let Some(certs) = config.root_cert.as_ref().filter(|c| !c.is_empty()) {
        return Some(certs.iter().map(|der| der_to_pem(der)).collect());
    }
    let file = config.root_cert_file.as_ref()?;
    std::fs::read_to_string(file)
        .ok()
        .filter(|pem| pem.contains("-----BEGIN CERTIFICATE-----"))
}

/// One DER certificate as PEM (base64 in 64-character lines).
pub fn der_to_pem(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        pem.push_str(&String::from_utf8_lossy(line));
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    pem
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn der_becomes_pem_in_64_character_lines_that_decode_back() {
        let der: Vec<u8> = (0..=255u8).cycle().take(500).collect();
        let pem = der_to_pem(&der);
        let lines: Vec<&str> = pem.lines().collect();
        assert_eq!(lines[0], "-----BEGIN CERTIFICATE-----");
        assert_eq!(*lines.last().unwrap(), "-----END CERTIFICATE-----");
        let body = &lines[1..lines.len() - 1];
        assert!(body[..body.len() - 1].iter().all(|l| l.len() == 64), "{body:?}");
        let joined: String = body.concat();
        assert_eq!(
            base64::engine::general_purpose::STANDARD.decode(joined).unwrap(),
            der
        );
    }

    #[test]
    fn build_metadata_is_dropped_from_the_server_version() {
        assert_eq!(release_version("v1.35.4+k3s1"), "v1.35.4");
        assert_eq!(release_version("v1.35.4"), "v1.35.4");
    }

    #[test]
    fn an_error_chain_is_one_line() {
        let inner = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
        let outer = kube::Error::ReadEvents(inner);
        assert_eq!(chain(&outer), "Error reading events stream: Connection refused");
    }
}
