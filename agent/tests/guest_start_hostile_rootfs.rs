//! A whole `unbounded-agent start` on a machine image whose links lead out of it
//! (`etc/systemd -> /etc/systemd`, `var/lib -> /`): `start` unpacks it, then refuses the first
//! write that would follow a link out, naming it, and the host's own files stay as they were.
//! `start` changes the host (modules, sysctls), so this runs as root in a lab VM (the `guest_`
//! binaries, see `harness/tests/lab_guest_tests.rs`); the node's files go below a temporary
//! `--root`, the artifacts come from an offline bundle made here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use agent::artifact::checksum::sha256_bytes;
use serde_json::json;

/// The version the bundle carries for kubelet and kubectl.
const KUBERNETES: &str = "1.35.0";

/// A tar header of `kind`, owned by root.
fn header(kind: tar::EntryType, mode: u32) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(0);
    header.set_size(0);
    header
}

/// A gzip tarball holding `etc/`, `var/` and the two links out.
fn hostile_machine_image() -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let mut tar = tar::Builder::new(gz);
    for dir in ["etc/", "var/"] {
        let mut dir_header = header(tar::EntryType::Directory, 0o755);
        tar.append_data(&mut dir_header, dir, std::io::empty()).unwrap();
    }
    for (name, target) in [("etc/systemd", "/etc/systemd"), ("var/lib", "/")] {
        let mut link = header(tar::EntryType::Symlink, 0o777);
        tar.append_link(&mut link, name, target).unwrap();
    }
    tar.into_inner().unwrap().finish().unwrap()
}

/// Writes `bytes` at `path` with its `.sha256` sidecar.
fn with_sidecar(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
    let name = path.file_name().unwrap().to_string_lossy();
    std::fs::write(
        path.with_file_name(format!("{name}.sha256")),
        format!("{}  {name}\n", sha256_bytes(bytes)),
    )
    .unwrap();
}

/// An offline bundle with the hostile image and stand-in kubelet and kubectl (installed, never
/// run: `start` stops before); returns the image's digest.
fn bundle(dir: &Path) -> String {
    let image = hostile_machine_image();
    with_sidecar(&dir.join("rootfs/rootfs.tar.gz"), &image);
    for name in ["kubelet", "kubectl"] {
        let path = dir.join(format!("kubernetes/v{KUBERNETES}/bin/linux/amd64/{name}"));
        with_sidecar(&path, format!("#!/bin/sh\necho stand-in {name}\n").as_bytes());
    }
    std::fs::write(
        dir.join("manifest.json"),
        json!({"versions": {"kubernetes": KUBERNETES}}).to_string(),
    )
    .unwrap();
    sha256_bytes(&image)
}

/// Every path below `dir` (not following links) with its contents or link target.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let contents = if meta.is_dir() {
                todo.push(path.clone());
                Vec::new()
            } else if meta.file_type().is_symlink() {
                std::fs::read_link(&path)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else {
                std::fs::read(&path).unwrap_or_default()
            };
            out.insert(path, contents);
        }
    }
    out
}

/// The names directly in `/` (where `var/lib -> /` leads).
fn top_level() -> Vec<PathBuf> {
    let mut names: Vec<_> = std::fs::read_dir("/")
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    names
}

#[test]
fn guest_start_refuses_a_machine_image_whose_links_lead_out_and_the_host_is_unchanged() {
    agent::guest_test::require_root_on_systemd();
    let work = tempfile::tempdir_in("/var/tmp").unwrap();
    let bundle_dir = work.path().join("bundle");
    let digest = bundle(&bundle_dir);
    let root = work.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let config = json!({
        "NodeName": "hostile",
        "Cluster": {
            "CaCertBase64": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJmYWtlCi0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K",
            "ClusterDNS": "10.96.0.10",
            "Version": format!("v{KUBERNETES}")
        },
        "Kubelet": {
            "ApiServer": "https://192.0.2.1:6443",
            "Auth": {"BootstrapToken": "abcdef.0123456789abcdef"},
            "NodeIP": "192.0.2.10",
            "Configuration": {"podCIDR": "10.244.9.0/24"}
        },
        "MachineImage": {"URL": "https://artifacts.invalid/rootfs/rootfs.tar.gz", "SHA256": digest},
        "OfflineArtifacts": {"Source": bundle_dir}
    });
    let config_path = work.path().join("config.json");
    std::fs::write(&config_path, config.to_string()).unwrap();

    let host_systemd = snapshot(Path::new("/etc/systemd"));
    let host_top = top_level();
    let out = Command::new(agent::test_binary!("unbounded-agent"))
        .args(["start", "--config"])
        .arg(&config_path)
        .arg("--root")
        .arg(&root)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let said = format!("stdout:\n{stdout}\nstderr:\n{stderr}");

    assert!(!out.status.success(), "start went through:\n{said}");
    // It got as far as unpacking the image: the refusal is the write, not an earlier check.
    let machine = root.join("var/lib/machines/kube1");
    assert_eq!(
        std::fs::read_link(machine.join("etc/systemd")).ok().as_deref(),
        Some(Path::new("/etc/systemd")),
        "the image was not unpacked as written:\n{said}"
    );
    assert!(
        stderr.contains("a symbolic link on the way leads out of"),
        "the error does not say a link leads out:\n{said}"
    );
    assert!(
        stderr.contains(&machine.display().to_string()),
        "the error does not name the machine's root:\n{said}"
    );
    assert_eq!(
        snapshot(Path::new("/etc/systemd")),
        host_systemd,
        "the host's /etc/systemd changed:\n{said}"
    );
    assert_eq!(top_level(), host_top, "something was written at /:\n{said}");
}
