//! Pinned recipes for the lab's images and third-party artifacts, built into the cache.
//!
//! `host`: the VM host image (qcow2 + kernel + initrd); `rootfs`: the nspawn
//! machine rootfs tarball; `coredns`: the CoreDNS release artifact and offline bundle;
//! `kubernetes`: the control plane and node binaries and etcd;
//! `oci`: the pause and test container images as OCI archives (`oci_layout` writes them);
//! `kind_tool`: the `kind` CLI and its base image's files; `kind_node`: the Kind node image.
//! Shared by them: `recipe` (the `recipe.env` + `build.sh` pair of the built-from-source ones),
//! `entry` (a built entry's files: finding it, its JSON, `.sha256` sidecars), `mmdebstrap`, `go`,
//! and `error` ([`ImageError`], what all of them fail with).

pub mod coredns;
pub mod entry;
pub mod error;
pub mod go;
pub mod host;
pub mod kind_node;
pub mod kind_tool;
pub mod kubernetes;
pub mod mmdebstrap;
pub mod oci;
pub mod oci_layout;
pub mod prune;
pub mod recipe;
pub mod rootfs;

pub use error::ImageError;
