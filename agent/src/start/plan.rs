//! What `start` will write, decided before anything changes (pure): the pod CIDR, the sandbox
//! image, and every file of the node — LocalDNS's (from [`crate::render::render`]), the nspawn
//! settings, containerd (and its drop-in removing empty CNI results), CNI, kubelet's unit,
//! kubeconfig and CA, and the host's sysctl and module files.

use std::path::PathBuf;

use base64::Engine as _;

use crate::goal::Goal;
use crate::render::{
    self, Place, RenderError, Rendered, RenderedFile, cni, cni_results, containerd, host_prep, kubelet_node,
    machine_stop, nspawn,
};
use crate::validate::{Config, ContainerImage};

/// The config path of the node's pod CIDR.
pub const POD_CIDR_FIELD: &str = "Kubelet.Configuration.podCIDR";

/// A config that `start` cannot use although `validate` accepts it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    #[error("{field}: {reason}")]
    Field { field: String, reason: String },
    #[error("{0}")]
    Render(String),
}

fn field(field: &str, reason: impl Into<String>) -> PlanError {
    PlanError::Field {
        field: field.into(),
        reason: reason.into(),
    }
}

/// The node's pod CIDR, `Kubelet.Configuration.podCIDR` (the bridge CNI config hands out its
/// addresses; kubelet gets it too). Required by `start`: an IPv4 network `a.b.c.d/n`, n in 8–30,
/// without host bits.
pub fn pod_cidr(config: &Config) -> Result<String, PlanError> {
    let raw = config.kubelet.configuration.get("podCIDR").ok_or_else(|| {
        field(
            POD_CIDR_FIELD,
            "is required by `start` (the node's pod network, e.g. 10.244.1.0/24)",
        )
    })?;
    let text = raw
        .as_str()
        .ok_or_else(|| field(POD_CIDR_FIELD, format!("{raw} is not a string")))?;
    check_ipv4_cidr(text).map_err(|reason| field(POD_CIDR_FIELD, reason))?;
    Ok(text.to_owned())
}

pub use crate::names::check_ipv4_cidr;

/// The pause image among `ContainerImages`: the first whose repository's last path component is
/// `pause` (`registry.k8s.io/pause:3.10.1`). It becomes containerd's `sandbox_image`.
pub fn sandbox_image(images: &[ContainerImage]) -> Option<&str> {
    images
        .iter()
        .map(|i| i.reference.as_str())
        .find(|r| repository(r).rsplit('/').next() == Some("pause"))
}

/// The repository part of an image ref: without `@digest` and without a `:tag` after the last `/`.
pub fn repository(reference: &str) -> &str {
    let no_digest = reference.split('@').next().unwrap_or(reference);
    match no_digest.rfind(':') {
        Some(colon) if colon > no_digest.rfind('/').unwrap_or(0) => &no_digest[..colon],
        _ => no_digest,
    }
}

/// The kubelet command-line settings from the config.
pub fn kubelet_flags(config: &Config) -> kubelet_node::KubeletFlags {
    let node_ip = (!config.kubelet.node_ips.is_empty()).then(|| {
        config
            .kubelet
            .node_ips
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    });
    kubelet_node::KubeletFlags {
        node_name: config.node_name.to_string(),
        node_ip,
        labels: config
            .kubelet
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect(),
        register_with_taints: config.kubelet.register_with_taints.clone(),
    }
}

/// Every file of the node for `goal` (whose slot is the machine's). Without LocalDNS the
/// machine's `/etc/resolv.conf` is a copy of the host's (`host_resolv_conf`): the rootfs ships an
/// empty one and the machine shares the host's network.
pub fn node_files(config: &Config, goal: &Goal, host_resolv_conf: &str) -> Result<Rendered, PlanError> {
    let pod_cidr = pod_cidr(config)?;
    let ca = base64::engine::general_purpose::STANDARD
        .decode(config.cluster.ca_cert_base64.trim())
        .map_err(|e| field("Cluster.CaCertBase64", format!("is not valid base64: {e}")))?;
    let with_defaults = Goal {
        kubelet: kubelet_node::with_defaults(&goal.kubelet, &pod_cidr),
        ..goal.clone()
    };
    let mut out =
        render::render(&with_defaults).map_err(|e: RenderError| PlanError::Render(e.to_string()))?;
    let slot = goal.slot;
    let mut add = |place: Place, local: &str, mode: u32, contents: Vec<u8>| {
        let path = match place {
            Place::Host => PathBuf::from(local),
            Place::Machine => slot.rootfs().join(local.trim_start_matches('/')),
        };
        out.files.push(RenderedFile {
            path,
            local_path: PathBuf::from(local),
            place,
            mode,
            contents,
        });
    };
    add(
        Place::Host,
        host_prep::SYSCTL_FILE,
        0o644,
        host_prep::sysctl_conf().into_bytes(),
    );
    add(
        Place::Host,
        host_prep::MODULES_FILE,
        0o644,
        host_prep::modules_conf().into_bytes(),
    );
    add(
        Place::Host,
        &nspawn::nspawn_path(slot),
        0o644,
        nspawn::nspawn_file(slot).into_bytes(),
    );
    add(
        Place::Host,
        &nspawn::override_path(slot),
        0o644,
        nspawn::override_conf(slot).into_bytes(),
    );
    add(
        Place::Machine,
        "/etc/containerd/config.toml",
        0o644,
        containerd::config_toml(sandbox_image(&config.container_images)).into_bytes(),
    );
    add(
        Place::Machine,
        cni_results::SCRIPT,
        0o755,
        cni_results::script().into_bytes(),
    );
    add(
        Place::Machine,
        cni_results::DROP_IN,
        0o644,
        cni_results::drop_in().into_bytes(),
    );
    add(
        Place::Machine,
        machine_stop::DROP_IN,
        0o644,
        machine_stop::conf().into_bytes(),
    );
    add(
        Place::Machine,
        cni::CONFLIST,
        0o644,
        cni::bridge_conflist(&pod_cidr).into_bytes(),
    );
    add(
        Place::Machine,
        kubelet_node::KUBELET_UNIT,
        0o644,
        kubelet_node::unit(&kubelet_flags(config)).into_bytes(),
    );
    add(
        Place::Machine,
        kubelet_node::BOOTSTRAP_KUBECONFIG,
        0o600,
        kubelet_node::bootstrap_kubeconfig(&config.kubelet.api_server, &config.kubelet.bootstrap_token)
            .into_bytes(),
    );
    add(Place::Machine, kubelet_node::CA_CERT, 0o644, ca);
    if goal.local_dns.is_none() {
        add(
            Place::Machine,
            render::paths::MACHINE_RESOLV_CONF,
            0o644,
            host_resolv_conf.as_bytes().to_vec(),
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("10.244.1.0/24", true)]
    #[case("10.244.0.0/16", true)]
    #[case("10.244.1.5/24", false)]
    #[case("10.244.1.0", false)]
    #[case("10.244.1.0/31", false)]
    #[case("fd00::/64", false)]
    fn pod_cidrs_are_ipv4_networks(#[case] text: &str, #[case] ok: bool) {
        assert_eq!(check_ipv4_cidr(text).is_ok(), ok, "{text}");
    }

    #[rstest]
    #[case("registry.k8s.io/pause:3.10.1", "registry.k8s.io/pause")]
    #[case("localhost:5000/pause", "localhost:5000/pause")]
    #[case("pause@sha256:abc", "pause")]
    fn repositories_lose_tag_and_digest(#[case] reference: &str, #[case] want: &str) {
        assert_eq!(repository(reference), want);
    }

    #[test]
    fn the_pause_image_is_found_by_its_repository_name() {
        let image = |r: &str| ContainerImage {
            reference: r.into(),
            url: None,
            sha256: None,
        };
        let images = [
            image("lab.local/test/busybox:1.35.0"),
            image("registry.k8s.io/pause:3.10.1"),
        ];
        assert_eq!(sandbox_image(&images), Some("registry.k8s.io/pause:3.10.1"));
        assert_eq!(sandbox_image(&images[..1]), None);
        assert_eq!(sandbox_image(&[image("lab/pauser:1")]), None);
    }
}
