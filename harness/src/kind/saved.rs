//! A Kind cluster's node saved into a directory and a new cluster restored from it: what a
//! joined-node checkpoint holds of a Kind lab ([`crate::checkpoint`]).
//!
//! A saved node is the control-plane container's state, taken once the container is stopped:
//!
//! ```text
//! kind-var.tar              its /var volume (etcd data, the kubelet's state, containerd's
//!                           images and snapshots), tarred by a helper container of the node image
//! kind-etc-kubernetes/      /etc/kubernetes (PKI, static pod manifests, kubeconfigs)
//! kind-files/               Kind's own files of /kind: kubeadm.conf, old-ipv4, old-ipv6,
//!                           product_uuid
//! kind-node.json            the node's hostname (its Node name), the node image, the lab's
//!                           bootstrap token
//! ```
//!
//! Restoring creates the container as `kind create cluster` does (the same run arguments, the
//! `io.x-k8s.kind.cluster` label naming the new cluster, the cluster's own network, a new `/var`
//! volume labelled for `kind delete cluster`), fills it from the saved files and starts it under the saved hostname,
//! so the Node, its certificates and every object in etcd are the saved ones. Kind's entrypoint
//! sees the container's new address, rewrites it into the manifests and kubeconfigs and
//! regenerates the API server's certificate (its SANs, the lab address among them, come from the
//! saved `kubeadm.conf`). `kind get clusters`, `kind export kubeconfig` and `kind delete cluster`
//! treat the restored cluster as one of their own.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use agent::exec::{CommandFailed, run, run_stdout};

use super::cluster::{KindCluster, KindError, ensure_lib_modules, load_image};
use super::engine::{Engine, EngineKind};
use crate::images::kind_node::KindNodeImage;
use crate::images::kind_tool::KindTool;
use crate::wait::{Attempt, WaitTimeout, retry, wait_until};

/// The `/var` volume's contents.
pub const VAR_TAR: &str = "kind-var.tar";
/// A copy of `/etc/kubernetes`.
pub const ETC_DIR: &str = "kind-etc-kubernetes";
/// Kind's files of `/kind` ([`KIND_FILES`]).
pub const FILES_DIR: &str = "kind-files";
/// [`SavedKindNode`].
pub const INFO: &str = "kind-node.json";
/// The files of `/kind` Kind writes at create and its entrypoint reads at every start; the
/// first two must exist.
const KIND_FILES: [&str; 4] = ["kubeadm.conf", "old-ipv4", "old-ipv6", "product_uuid"];
/// How long systemd in the node gets to stop before the engine kills it (etcd's data survives
/// a kill; a longer wait only slows the save).
const STOP_SECONDS: &str = "10";

/// What `kind-node.json` holds.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SavedKindNode {
    /// The node container's hostname: the Node's name in the saved cluster.
    pub hostname: String,
    /// The node image the container ran (its reference in the engine).
    pub image: String,
    /// The lab's bootstrap token in the saved cluster.
    pub bootstrap_token: String,
}

impl SavedKindNode {
    /// Reads `dir/kind-node.json` and checks that the other saved files are there.
    pub fn load(dir: &Path) -> Result<SavedKindNode, String> {
        let text = fs::read_to_string(dir.join(INFO)).map_err(|e| format!("{INFO}: {e}"))?;
        let saved: SavedKindNode = serde_json::from_str(&text).map_err(|e| format!("{INFO}: {e}"))?;
        if fs::metadata(dir.join(VAR_TAR)).map(|m| m.len()).unwrap_or(0) == 0 {
            return Err(format!("{VAR_TAR} is missing or empty"));
        }
        if !dir.join(ETC_DIR).join("pki").join("ca.crt").is_file() {
            return Err(format!("{ETC_DIR}/pki/ca.crt is missing"));
        }
        for file in &KIND_FILES[..2] {
            if !dir.join(FILES_DIR).join(file).is_file() {
                return Err(format!("{FILES_DIR}/{file} is missing"));
            }
        }
        Ok(saved)
    }
}

fn write_err(path: &Path) -> impl FnOnce(std::io::Error) -> KindError + '_ {
    move |source| KindError::Write {
        path: path.to_path_buf(),
        source,
    }
}

/// The name of the volume mounted at `/var` in `container`.
fn var_volume(engine: &Engine, container: &str) -> Result<String, KindError> {
    let name = run_stdout(engine.command().args([
        "inspect",
        "--format",
        "{{range .Mounts}}{{if eq .Destination \"/var\"}}{{.Name}}{{end}}{{end}}",
        container,
    ]))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(KindError::Kubeconfig(format!(
            "node {container} has no volume at /var"
        )));
    }
    Ok(name.to_string())
}

/// A helper container of the node image running `tar` with `volume` at `/v` and the host's
/// `dir` at `/d` (read-only when only read).
fn tar_in_helper(engine: &Engine, image: &str, volume: &str, dir: &Path, extract: bool) -> Command {
    let mut command = engine.command();
    let (volume_mount, dir_mount) = match extract {
        true => (format!("{volume}:/v"), format!("{}:/d:ro", dir.display())),
        false => (format!("{volume}:/v:ro"), format!("{}:/d", dir.display())),
    };
    command.args([
        "run",
        "--rm",
        "--privileged",
        "--network",
        "none",
        "--entrypoint",
        "tar",
        "-v",
        &volume_mount,
        "-v",
        &dir_mount,
        image,
        "-C",
        "/v",
        "--numeric-owner",
        "--xattrs",
        "--xattrs-include=*",
    ]);
    command
}

impl KindCluster {
    /// Stops the control-plane node and saves it into `dir` (see the module docs), with the
    /// lab's `bootstrap_token`. The container stays, stopped, for `delete`.
    pub fn save_node(&self, dir: &Path, image: &str, bootstrap_token: &str) -> Result<(), KindError> {
        let container = self.control_plane_container();
        let engine = self.engine();
        fs::create_dir_all(dir.join(FILES_DIR)).map_err(write_err(dir))?;
        let hostname =
            run_stdout(
                engine
                    .command()
                    .args(["inspect", "--format", "{{.Config.Hostname}}", &container]),
            )?
            .trim()
            .to_string();
        let volume = var_volume(engine, &container)?;
        run(engine.command().args(["stop", "-t", STOP_SECONDS, &container]))?;
        run(engine
            .command()
            .args(["cp", &format!("{container}:/etc/kubernetes")])
            .arg(dir.join(ETC_DIR)))?;
        for (i, file) in KIND_FILES.iter().enumerate() {
            let to = dir.join(FILES_DIR).join(file);
            let copied = run(engine
                .command()
                .args(["cp", &format!("{container}:/kind/{file}")])
                .arg(&to));
            match copied {
                Ok(_) => {}
                Err(_) if i >= 2 => {}
                Err(e) => return Err(e.into()),
            }
        }
        run(tar_in_helper(engine, image, &volume, dir, false).args(["-cf", &format!("/d/{VAR_TAR}"), "."]))?;
        let info = SavedKindNode {
            hostname,
            image: image.to_string(),
            bootstrap_token: bootstrap_token.to_string(),
        };
        let text = serde_json::to_string_pretty(&info).expect("a SavedKindNode serializes");
        fs::write(dir.join(INFO), text + "\n").map_err(write_err(&dir.join(INFO)))?;
        Ok(())
    }

    /// Cluster `name` restored from the node saved in `saved` (see the module docs), its
    /// kubeconfig in `dir`; waits until its API server answers. A cluster of that name is
    /// deleted first; on failure, what was made is removed.
    pub fn restore(
        name: &str,
        engine: &Engine,
        tool: &KindTool,
        image: &KindNodeImage,
        dir: &Path,
        saved: &Path,
        timeout: Duration,
    ) -> Result<(KindCluster, SavedKindNode), KindError> {
        let info = SavedKindNode::load(saved).map_err(|why| {
            KindError::Kubeconfig(format!("the saved Kind node in {}: {why}", saved.display()))
        })?;
        if info.image != image.reference {
            return Err(KindError::Kubeconfig(format!(
                "the saved Kind node in {} ran {}, the lab's node image is {}",
                saved.display(),
                info.image,
                image.reference
            )));
        }
        let cluster = KindCluster::named(name, engine, tool, dir);
        fs::create_dir_all(dir).map_err(write_err(dir))?;
        ensure_lib_modules()?;
        load_image(engine, image)?;
        if super::cluster::list(engine, tool)?.iter().any(|c| c == name) {
            cluster.delete()?;
        }
        let made = cluster.create_restored_node(&info, saved, timeout);
        if let Err(err) = made {
            if let Err(e) = cluster.delete() {
                tracing::warn!("removing the half-restored Kind cluster {name}: {e}");
            }
            return Err(err);
        }
        Ok((cluster, info))
    }

    fn create_restored_node(
        &self,
        info: &SavedKindNode,
        saved: &Path,
        timeout: Duration,
    ) -> Result<(), KindError> {
        let engine = self.engine();
        let container = self.control_plane_container();
        let network = self.network();
        super::cluster::ensure_network(engine, &network)?;
        let volume =
            run_stdout(
                engine
                    .command()
                    .args(["volume", "create", "--label", &format!("{container}=true")]),
            )?
            .trim()
            .to_string();
        run(
            tar_in_helper(engine, &info.image, &volume, saved, true).args(["-xpf", &format!("/d/{VAR_TAR}")])
        )?;
        run(engine
            .command()
            .args(["create", "--name", &container, "--hostname", &info.hostname])
            .args(restored_node_args(engine.kind, &self.name, &network, &volume))
            .arg(&info.image))?;
        run(engine
            .command()
            .arg("cp")
            .arg(saved.join(ETC_DIR).join("."))
            .arg(format!("{container}:/etc/kubernetes")))?;
        for file in KIND_FILES {
            let from = saved.join(FILES_DIR).join(file);
            if from.is_file() {
                run(engine
                    .command()
                    .arg("cp")
                    .arg(&from)
                    .arg(format!("{container}:/kind/{file}")))?;
            }
        }
        run(engine.command().args(["start", &container]))?;
        wait_until::<_, WaitTimeout>(
            &self.name,
            timeout,
            "the restored API server to answer",
            || match self.export_kubeconfig().and_then(|()| self.api_server_ready()) {
                Ok(()) => Attempt::Ready(()),
                Err(e) => retry(e),
            },
        )
        .map_err(|e| KindError::Kubeconfig(e.to_string()))?;
        Ok(())
    }

    /// `kind export kubeconfig` into the cluster's kubeconfig.
    fn export_kubeconfig(&self) -> Result<(), CommandFailed> {
        run(self
            .kind()
            .args(["export", "kubeconfig", "--name", &self.name, "--kubeconfig"])
            .arg(&self.kubeconfig))
        .map(|_| ())
    }

    /// `/readyz` of the API server answers `ok` in the control-plane node.
    fn api_server_ready(&self) -> Result<(), CommandFailed> {
        self.exec_in_node(&["kubectl", "get", "--raw", "/readyz"])
            .map(|_| ())
    }
}

/// The engine arguments `kind create cluster` gives a control-plane node in `engine` (Kind's
/// Podman and Docker providers differ a little), for cluster `cluster` in `network` with its
/// `/var` on `volume`; the API server's port goes to a free port of the host's loopback.
pub fn restored_node_args(engine: EngineKind, cluster: &str, network: &str, volume: &str) -> Vec<String> {
    let mut args: Vec<String> = [
        "--label",
        &format!("io.x-k8s.kind.cluster={cluster}"),
        "--label",
        "io.x-k8s.kind.role=control-plane",
        "--privileged",
        "--tmpfs",
        "/tmp",
        "--tmpfs",
        "/run",
        "--volume",
        "/lib/modules:/lib/modules:ro",
        "-e",
        "KIND_EXPERIMENTAL_CONTAINERD_SNAPSHOTTER",
        "--tty",
        "--net",
        network,
        "-e",
        &format!("container={}", engine.name()),
        "--cgroupns=private",
        "--publish",
        "127.0.0.1::6443/tcp",
        "-e",
        "KUBECONFIG=/etc/kubernetes/admin.conf",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let engine_args: &[&str] = match engine {
        EngineKind::Podman => &["--volume", &format!("{volume}:/var:suid,exec,dev")],
        EngineKind::Docker => &[
            "--volume",
            &format!("{volume}:/var"),
            "--security-opt",
            "seccomp=unconfined",
            "--security-opt",
            "apparmor=unconfined",
            "--restart=on-failure:1",
            "--init=false",
        ],
    };
    args.extend(engine_args.iter().map(|s| s.to_string()));
    args
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn a_restored_node_carries_kinds_labels_and_its_var_volume() {
        let args = restored_node_args(EngineKind::Podman, "lab-4", "kind-lab-4", "vol1");
        let joined = args.join(" ");
        assert!(joined.contains("-e container=podman"), "{joined}");
        assert!(joined.contains("--label io.x-k8s.kind.cluster=lab-4"), "{joined}");
        assert!(
            joined.contains("--label io.x-k8s.kind.role=control-plane"),
            "{joined}"
        );
        assert!(joined.contains("--volume vol1:/var:suid,exec,dev"), "{joined}");
        assert!(joined.contains("--privileged"), "{joined}");
        assert!(joined.contains("--net kind-lab-4"), "{joined}");
        let docker = restored_node_args(EngineKind::Docker, "lab-4", "kind-lab-4", "vol1").join(" ");
        assert!(docker.contains("--volume vol1:/var "), "{docker}");
        assert!(docker.contains("-e container=docker"), "{docker}");
        assert!(docker.contains("seccomp=unconfined"), "{docker}");
        assert!(joined.contains("--publish 127.0.0.1::6443/tcp"), "{joined}");
    }

    #[test]
    fn a_saved_node_without_its_var_tar_or_kubeadm_conf_does_not_load() {
        let dir = tempfile::tempdir().unwrap();
        let info = SavedKindNode {
            hostname: "lab-1-control-plane".into(),
            image: "localhost/unbounded-kind-node:k".into(),
            bootstrap_token: "abcdef.0123456789abcdef".into(),
        };
        fs::write(dir.path().join(INFO), serde_json::to_string(&info).unwrap()).unwrap();
        let err = SavedKindNode::load(dir.path()).unwrap_err();
        assert!(err.contains(VAR_TAR), "{err}");
        fs::write(dir.path().join(VAR_TAR), "tar").unwrap();
        fs::create_dir_all(dir.path().join(ETC_DIR).join("pki")).unwrap();
        fs::write(dir.path().join(ETC_DIR).join("pki/ca.crt"), "ca").unwrap();
        let err = SavedKindNode::load(dir.path()).unwrap_err();
        assert!(err.contains("kubeadm.conf"), "{err}");
        fs::create_dir(dir.path().join(FILES_DIR)).unwrap();
        for file in ["kubeadm.conf", "old-ipv4"] {
            fs::write(dir.path().join(FILES_DIR).join(file), "x").unwrap();
        }
        assert_eq!(SavedKindNode::load(dir.path()).unwrap(), info);
    }

    /// A saved node that loads, with stand-in files (a checkpoint's `control-plane/` in tests).
    pub(crate) fn fake_saved_node(dir: &Path) -> std::io::Result<()> {
        let info = SavedKindNode {
            hostname: "lab-1-control-plane".into(),
            image: "localhost/unbounded-kind-node:k".into(),
            bootstrap_token: "abcdef.0123456789abcdef".into(),
        };
        fs::create_dir_all(dir.join(ETC_DIR).join("pki"))?;
        fs::create_dir_all(dir.join(FILES_DIR))?;
        fs::write(dir.join(INFO), serde_json::to_string(&info).unwrap())?;
        fs::write(dir.join(VAR_TAR), "tar")?;
        fs::write(dir.join(ETC_DIR).join("pki/ca.crt"), "ca")?;
        for file in ["kubeadm.conf", "old-ipv4"] {
            fs::write(dir.join(FILES_DIR).join(file), "x")?;
        }
        Ok(())
    }
}
