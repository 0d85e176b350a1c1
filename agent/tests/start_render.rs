//! Expected-output tests of every file `start` writes (`agent::start::plan::node_files`): each
//! `tests/render/start/<case>.json` (config, host facts, machine) is rendered and compared with
//! `<case>.expected/` (every regular file, as if it were `/`) and `<case>.listing` (every path
//! with its mode, every link with its target).
//!
//! Regenerate after an intended change, then review the diff:
//! `UPDATE_EXPECTED=1 cargo test -p agent --test start_render`

mod render_support;

use std::path::{Path, PathBuf};

use agent::render::Rendered;
use render_support::{check_expected_outputs, load_case, text};

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/render/start")
}

fn render_case(path: &Path) -> Rendered {
    let case = load_case(path);
    agent::start::plan::node_files(&case.config, &case.goal, &case.facts.host_resolv_conf)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn every_start_case_renders_exactly_its_expected_files() {
    check_expected_outputs(&cases_dir(), 2, "start_render", render_case);
}

#[test]
fn the_bootstrap_kubeconfig_is_private_and_holds_the_token() {
    let r = render_case(&cases_dir().join("localdns.json"));
    let kubeconfig = r
        .file("/var/lib/machines/kube1/etc/kubernetes/bootstrap-kubelet.conf")
        .expect("bootstrap kubeconfig rendered");
    assert_eq!(kubeconfig.mode, 0o600);
    assert!(String::from_utf8_lossy(&kubeconfig.contents).contains("token: abcdef.0123456789abcdef"));
}

#[test]
fn kubelet_keeps_the_localdns_keys_over_the_users_and_gets_the_pod_cidr() {
    let r = render_case(&cases_dir().join("localdns.json"));
    let config = text(&r, "/var/lib/machines/kube1/var/lib/kubelet/config.yaml");
    assert!(config.contains("clusterDNS:\n- 169.254.10.11\n"), "{config}");
    assert!(config.contains("podCIDR: 10.244.1.0/24\n"), "{config}");
    assert!(config.contains("cgroupDriver: systemd\n"), "{config}");
    let off = render_case(&cases_dir().join("localdns-off.json"));
    let config = text(&off, "/var/lib/machines/kube2/var/lib/kubelet/config.yaml");
    assert!(config.contains("clusterDNS:\n- 10.96.0.10\n"), "{config}");
    assert!(config.contains("clusterDomain: lab.local\n"), "{config}");
}

#[test]
fn containerd_sandbox_image_is_the_pause_ref_only_when_one_is_given() {
    let r = render_case(&cases_dir().join("localdns.json"));
    let toml = text(&r, "/var/lib/machines/kube1/etc/containerd/config.toml");
    assert!(
        toml.contains("sandbox_image = \"registry.k8s.io/pause:3.10.1\""),
        "{toml}"
    );
    let off = render_case(&cases_dir().join("localdns-off.json"));
    assert!(!text(&off, "/var/lib/machines/kube2/etc/containerd/config.toml").contains("sandbox_image"));
}

#[test]
fn without_localdns_no_localdns_file_is_written() {
    let off = render_case(&cases_dir().join("localdns-off.json"));
    let localdns: Vec<_> = off
        .files
        .iter()
        .filter(|f| f.path.to_string_lossy().contains("localdns"))
        .map(|f| f.path.display().to_string())
        .collect();
    assert!(localdns.is_empty(), "{localdns:?}");
}
