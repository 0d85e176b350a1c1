//! The lab: image and artifact builds, the lab network, the control plane,
//! QEMU VMs over QMP, guest commands and evidence collection.

pub mod addresses;
pub mod artifacts;
pub mod bench;
pub mod cache;
pub mod checkpoint;
pub mod child;
pub mod cli;
pub mod controlplane;
pub mod deploy;
pub mod guest_tests;
pub mod images;
pub mod inspect;
pub mod kind;
pub mod lab;
pub mod localdns_live;
pub mod netns;
pub mod node_config;
pub mod phase_clock;
pub mod progress;
pub mod repo;
pub mod suite_times;
pub mod vm;
pub mod wait;
