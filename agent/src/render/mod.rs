//! Rendering: every file LocalDNS installs (docs/design.md §5, §6), as a pure function
//! of the [`Goal`]. The same goal always gives the same bytes.
//!
//! Paths are absolute on the host: machine files are under
//! `/var/lib/machines/<slot>/`. [`write::write_under`] writes them below a root
//! directory (`/` on a real host).

pub mod cni;
pub mod cni_results;
pub mod containerd;
pub mod corefile;
pub mod host;
pub mod host_prep;
pub mod kubeconfig;
pub mod kubelet;
pub mod kubelet_node;
pub mod machine;
pub mod machine_stop;
pub mod nspawn;
pub use crate::paths;
pub mod unit_value;
pub mod units;
pub mod write;

use std::path::{Path, PathBuf};

pub use crate::corefile::CorefileError;
pub use write::{WriteError, write_under};

use crate::goal::Goal;

/// The first lines of every generated file whose format allows comments.
pub const HEADER: &str =
    "# Written by unbounded-agent (LocalDNS) from the agent config; edits are overwritten.\n";

/// Where a file lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Place {
    /// On the host itself.
    Host,
    /// Inside the machine's rootfs.
    Machine,
}

/// One generated regular file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedFile {
    /// Absolute path on the host (machine files include `/var/lib/machines/<slot>`).
    pub path: PathBuf,
    /// The path as seen from where it lives (inside the machine for machine files).
    pub local_path: PathBuf,
    pub place: Place,
    pub mode: u32,
    pub contents: Vec<u8>,
}

/// One generated symbolic link (unit enablement, masking).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedLink {
    /// Absolute path on the host of the link itself.
    pub path: PathBuf,
    pub local_path: PathBuf,
    pub place: Place,
    /// The link's target, as written in the link (absolute, as seen from where it lives).
    pub target: PathBuf,
}

/// Everything LocalDNS installs for one goal, in a fixed order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rendered {
    pub files: Vec<RenderedFile>,
    pub links: Vec<RenderedLink>,
}

impl Rendered {
    /// The file at this host path, if rendered.
    pub fn file(&self, path: impl AsRef<Path>) -> Option<&RenderedFile> {
        self.files.iter().find(|f| f.path == path.as_ref())
    }

    /// The files that live in `place`.
    pub fn in_place(&self, place: Place) -> impl Iterator<Item = &RenderedFile> {
        self.files.iter().filter(move |f| f.place == place)
    }
}

/// A goal that cannot be rendered.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error(transparent)]
    Corefile(#[from] CorefileError),
    #[error("kubelet configuration: {0}")]
    KubeletYaml(#[from] serde_yaml_ng::Error),
}

struct Builder<'a> {
    goal: &'a Goal,
    out: Rendered,
}

impl Builder<'_> {
    fn host_path(&self, place: Place, local: &str) -> PathBuf {
        match place {
            Place::Host => PathBuf::from(local),
            Place::Machine => self.goal.slot.rootfs().join(local.trim_start_matches('/')),
        }
    }

    fn file(&mut self, place: Place, local: &str, contents: String) {
        self.out.files.push(RenderedFile {
            path: self.host_path(place, local),
            local_path: PathBuf::from(local),
            place,
            mode: 0o644,
            contents: contents.into_bytes(),
        });
    }

    fn link(&mut self, place: Place, local: &str, target: &str) {
        self.out.links.push(RenderedLink {
            path: self.host_path(place, local),
            local_path: PathBuf::from(local),
            place,
            target: PathBuf::from(target),
        });
    }
}

/// Renders every file for the goal. With LocalDNS disabled only the kubelet
/// configuration is rendered (its `clusterDNS` is then `Cluster.ClusterDNS`).
pub fn render(goal: &Goal) -> Result<Rendered, RenderError> {
    use paths::*;
    let mut b = Builder {
        goal,
        out: Rendered::default(),
    };
    if let Some(l) = &goal.local_dns {
        let resolv = machine::resolv_conf(l);
        b.file(Place::Machine, COREFILE, corefile::render(l)?);
        b.file(Place::Machine, FALLBACK_COREFILE, corefile::render_fallback(l)?);
        b.file(Place::Machine, LOCALDNS_RESOLV_CONF, resolv.clone());
        b.file(Place::Machine, MACHINE_RESOLV_CONF, resolv);
        b.file(Place::Machine, NODE_UPSTREAMS, machine::node_upstreams(l));
        b.file(Place::Machine, ENVIRONMENT, machine::environment(l));
        b.file(Place::Machine, LOCALDNS_SERVICE, units::service());
        b.file(Place::Machine, LOCALDNS_SLICE, units::slice(l));
        b.file(Place::Machine, LOCALDNS_BRIDGE_SERVICE, units::bridge_service());
        b.file(Place::Machine, LOCALDNS_SPARE_SERVICE, units::spare_service());
        b.file(
            Place::Machine,
            CONTAINERD_DROP_IN,
            units::requires_localdns_drop_in(),
        );
        b.file(
            Place::Machine,
            KUBELET_DROP_IN,
            units::requires_localdns_drop_in(),
        );
        b.link(Place::Machine, LOCALDNS_SERVICE_WANTS_LINK, LOCALDNS_SERVICE);
        b.link(Place::Machine, RESOLVED_MASK_LINK, "/dev/null");
    }
    b.file(
        Place::Machine,
        KUBELET_CONFIG,
        kubelet::config_yaml(&goal.kubelet)?,
    );
    if let Some(l) = &goal.local_dns {
        b.file(Place::Host, NETWORK_UNIT, host::network_unit(goal));
        b.file(Place::Host, &nspawn_drop_in(goal.slot), host::nspawn_drop_in());
        b.file(Place::Host, NFT_SCRIPT, host::nft_script(l));
        b.link(Place::Host, NETWORK_UNIT_WANTS_LINK, NETWORK_UNIT);
        b.file(Place::Host, UPSTREAMS_PATH_UNIT, host::upstreams_path_unit());
        b.file(Place::Host, UPSTREAMS_SERVICE, host::upstreams_service(goal));
        b.link(Place::Host, UPSTREAMS_PATH_WANTS_LINK, UPSTREAMS_PATH_UNIT);
    }
    Ok(b.out)
}

#[cfg(test)]
mod tests;
