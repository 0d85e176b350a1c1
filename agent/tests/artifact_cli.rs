//! `unbounded-agent coredns install` end to end, with the real CoreDNS artifact
//! that `harness images build` put in the lab cache (found the way the harness
//! finds it: `$LAB_CACHE_DIR`, else `$XDG_CACHE_HOME/unbounded-lab`, else
//! `~/.cache/unbounded-lab`; entry `coredns/<key>/` whose `build.json` names
//! the version the agent installs by default).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use agent::artifact::checksum::sha256_file;
use agent::artifact::source::COREDNS_DEFAULT_VERSION;

fn cache_root() -> PathBuf {
    let var = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("LAB_CACHE_DIR")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("unbounded-lab")))
        .or_else(|| var("HOME").map(|d| d.join(".cache/unbounded-lab")))
        .expect("LAB_CACHE_DIR, XDG_CACHE_HOME or HOME must be set")
}

/// The cache entry of the real CoreDNS artifact, or a failure naming the command that builds it.
fn artifact_dir() -> PathBuf {
    let kind_dir = cache_root().join("coredns");
    let found = fs::read_dir(&kind_dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .find(|dir| {
            fs::read_to_string(dir.join("build.json"))
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .is_some_and(|j| j["version"] == COREDNS_DEFAULT_VERSION)
        });
    found.unwrap_or_else(|| {
        panic!(
            "the CoreDNS {COREDNS_DEFAULT_VERSION} artifact is not built in {}: run `harness images build`",
            kind_dir.display()
        )
    })
}

fn install(config: &serde_json::Value, rootfs: &Path) -> Output {
    let work = tempfile::tempdir().unwrap();
    let config_path = work.path().join("config.json");
    fs::write(&config_path, config.to_string()).unwrap();
    Command::new(agent::test_binary!("unbounded-agent"))
        .args(["coredns", "install", "--config"])
        .arg(&config_path)
        .arg("--rootfs")
        .arg(rootfs)
        .output()
        .unwrap()
}

fn binary_sha256(dir: &Path) -> String {
    sha256_file(&dir.join(format!(
        "offline/coredns/v{COREDNS_DEFAULT_VERSION}/bin/linux/amd64/coredns"
    )))
    .unwrap()
}

#[test]
fn coredns_install_from_the_offline_bundle_prints_version_and_sha256() {
    let dir = artifact_dir();
    let rootfs = tempfile::tempdir().unwrap();
    let config = serde_json::json!({"OfflineArtifacts": {"Source": dir.join("offline")}});
    let out = install(&config, rootfs.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sha = binary_sha256(&dir);
    assert!(
        stdout.contains(&format!("version {COREDNS_DEFAULT_VERSION}\n")),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("sha256 {sha}\n")), "{stdout}");
    let binary = rootfs.path().join("usr/local/bin/coredns");
    assert_eq!(sha256_file(&binary).unwrap(), sha);
    assert!(
        stdout.starts_with(&format!("installed {}\n", binary.display())),
        "{stdout}"
    );

    // Again: the install record shows the binary is the same; it is kept.
    let out = install(&config, rootfs.path());
    let again = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        again.starts_with(&format!("kept {}\n", binary.display())),
        "{again}"
    );
    assert!(again.contains(&format!("sha256 {sha}\n")), "{again}");
}

#[test]
fn coredns_install_from_a_file_url_tarball() {
    let dir = artifact_dir();
    let rootfs = tempfile::tempdir().unwrap();
    let url = format!(
        "file://{}/release/v{{version}}/coredns_{{version}}_linux_{{arch}}.tgz",
        dir.display()
    );
    let config = serde_json::json!({"Downloads": {"CoreDNS": {"URL": url}}});
    let out = install(&config, rootfs.path());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        sha256_file(&rootfs.path().join("usr/local/bin/coredns")).unwrap(),
        binary_sha256(&dir)
    );
}

/// A plain-http address without the source's `AllowHTTP` is refused before anything is fetched
/// (nothing listens on the address) or written.
#[test]
fn coredns_install_refuses_plain_http_the_source_does_not_allow() {
    let rootfs = tempfile::tempdir().unwrap();
    let config = serde_json::json!({"Downloads": {"CoreDNS": {"URL": "http://127.0.0.1:9/coredns.tgz"}}});
    let out = install(&config, rootfs.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("Downloads.CoreDNS.URL")
            && stderr.contains("is plain http, which this source does not allow")
            && !stderr.contains("attempt"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(rootfs.path()).unwrap().count(), 0);
}

#[test]
fn coredns_install_refuses_a_bad_config_and_a_missing_bundle_changing_nothing() {
    let rootfs = tempfile::tempdir().unwrap();
    let out = install(&serde_json::json!({"Downloads": {"CoreDNZ": {}}}), rootfs.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("Downloads.CoreDNZ"), "{stderr}");
    let out = install(
        &serde_json::json!({"OfflineArtifacts": {"Source": "/nonexistent/bundle"}}),
        rootfs.path(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("offline bundle /nonexistent/bundle: cannot read manifest.json"),
        "{stderr}"
    );
    assert_eq!(fs::read_dir(rootfs.path()).unwrap().count(), 0);
}
