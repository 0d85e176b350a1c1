//! `lab.json` in a lab's run directory: where a running lab keeps its logs and its cluster,
//! written by its owner when the lab is up, so other processes (`harness lab status|logs`)
//! find them without the owner's memory. Removed with the run directory.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::{LabError, io_err};
use crate::controlplane::KindRecord;

/// The file name, in `$LAB_RUN_DIR/lab-<n>/`.
pub const RECORD_FILE: &str = "lab.json";

/// What a running lab tells other processes about itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabRecord {
    /// `lab-<n>`.
    pub name: String,
    pub number: u8,
    /// The lab's DNS and HTTP logs (`dns-queries.log`, `http-requests.log`).
    pub log_dir: PathBuf,
    /// The cluster, when the lab runs a control plane.
    pub cluster: Option<ClusterRecord>,
}

/// How to reach a lab's cluster from the host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterRecord {
    pub admin_kubeconfig: PathBuf,
    pub kubectl: PathBuf,
    /// The control plane's logs (`etcd.log`, `kube-apiserver.log`, ...).
    pub log_dir: PathBuf,
    /// The API server from the host.
    pub host_api_server: String,
    pub kubernetes_version: String,
    /// The Kind cluster, when the cluster is one.
    #[serde(default)]
    pub kind: Option<KindRecord>,
}

impl LabRecord {
    /// Writes `lab.json` into `run_dir`.
    pub fn write(&self, run_dir: &Path) -> Result<(), LabError> {
        let path = run_dir.join(RECORD_FILE);
        let text = serde_json::to_string_pretty(self).expect("a LabRecord serialises");
        std::fs::write(&path, text + "\n").map_err(io_err("writing the lab record", &path))
    }

    /// Reads `lab.json` from `run_dir`.
    pub fn read(run_dir: &Path) -> Result<LabRecord, LabError> {
        let path = run_dir.join(RECORD_FILE);
        let text = std::fs::read_to_string(&path).map_err(io_err("reading the lab record", &path))?;
        serde_json::from_str(&text).map_err(|e| LabError::Io {
            what: "parsing the lab record",
            path,
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_as_written_and_a_missing_one_names_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let record = LabRecord {
            name: "lab-3".into(),
            number: 3,
            log_dir: "/t/lab".into(),
            cluster: Some(ClusterRecord {
                admin_kubeconfig: "/run/unbounded-lab/lab-3/kubeconfig".into(),
                kubectl: "/cache/kubectl".into(),
                log_dir: "/t/lab/control-plane".into(),
                host_api_server: "https://127.0.0.1:16446".into(),
                kubernetes_version: "v1.35.4".into(),
                kind: Some(KindRecord {
                    name: "lab-3".into(),
                    kind: "/cache/kind".into(),
                    env: vec![("KIND_EXPERIMENTAL_PROVIDER".into(), "podman".into())],
                }),
            }),
        };
        record.write(dir.path()).unwrap();
        assert_eq!(LabRecord::read(dir.path()).unwrap(), record);
        let other = tempfile::tempdir().unwrap();
        let err = LabRecord::read(other.path()).unwrap_err().to_string();
        assert!(
            err.contains(&other.path().join(RECORD_FILE).display().to_string()),
            "{err}"
        );
    }
}
