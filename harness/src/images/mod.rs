//! Pinned recipes for the lab's images and third-party artifacts, built into the cache.
//!
//! `host`: the VM host image (qcow2 + kernel + initrd); `rootfs`: the nspawn
//! machine rootfs tarball; `coredns`: the CoreDNS release artifact and offline bundle;
//! `kubernetes`: the control plane and node binaries and etcd (built apart: `harness images kubernetes`).

pub mod coredns;
pub mod go;
pub mod host;
pub mod kubernetes;
pub mod mmdebstrap;
pub mod rootfs;
