//! The built images: the host image boots Debian's kernel with what the lab needs, the rootfs
//! tarball matches its checksum and holds containerd and the CNI plugins, and a missing image
//! fails at once naming `harness images build`.
//!
//! These read the images from the lab cache (`$LAB_CACHE_DIR`, default
//! ~/.cache/unbounded-lab); when one is missing they fail, naming the command
//! that builds it.

use std::fs;
use std::process::Command;

use harness::cache::Cache;
use harness::images::host::{self, config_has};
use harness::images::mmdebstrap::manifest_packages;
use harness::images::rootfs;

fn cache() -> Cache {
    Cache::open().expect("the lab cache directory")
}

#[test]
fn host_image_kernel_has_dummy_nftables_conntrack_and_virtio() {
    let image = host::require(&cache()).unwrap();
    let config = fs::read_to_string(&image.kernel_config).unwrap();
    for option in [
        "CONFIG_DUMMY",
        "CONFIG_NF_TABLES",
        "CONFIG_NF_CONNTRACK",
        "CONFIG_NFT_CT",
        "CONFIG_VETH",
        "CONFIG_VIRTIO_BLK",
        "CONFIG_VIRTIO_NET",
        "CONFIG_VIRTIO_CONSOLE",
        "CONFIG_EXT4_FS",
    ] {
        assert!(
            config_has(&config, option),
            "{option} is neither =y nor =m in {}",
            image.kernel_config.display()
        );
    }
    assert_eq!(
        image.has_9p,
        config_has(&config, "CONFIG_9P_FS") && config_has(&config, "CONFIG_NET_9P_VIRTIO"),
        "image.json's has_9p disagrees with the kernel config"
    );
    assert!(!image.kernel_version.is_empty());
    for file in [&image.kernel, &image.initrd] {
        let len = fs::metadata(file).unwrap().len();
        assert!(len > 1_000_000, "{} is only {len} bytes", file.display());
    }
}

#[test]
fn host_image_disk_is_a_standalone_qcow2_of_8_gib() {
    let image = host::require(&cache()).unwrap();
    let info = agent::exec::run_stdout(
        Command::new("qemu-img")
            .args(["info", "--output=json"])
            .arg(&image.disk),
    )
    .unwrap();
    let info: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["format"], "qcow2", "{info}");
    assert_eq!(info["virtual-size"], 8u64 << 30, "{info}");
    assert!(
        info.get("backing-filename").is_none(),
        "the base has a backing file: {info}"
    );
}

#[test]
fn host_image_manifest_lists_systemd_nftables_and_the_guest_agent_but_no_resolved() {
    let image = host::require(&cache()).unwrap();
    let names = manifest_packages(&fs::read_to_string(&image.packages).unwrap());
    for wanted in [
        "systemd",
        "nftables",
        "qemu-guest-agent",
        "systemd-container",
        "conntrack",
    ] {
        assert!(
            names.iter().any(|n| n == wanted),
            "{wanted} missing from {}",
            image.packages.display()
        );
    }
    assert!(
        !names.iter().any(|n| n == "systemd-resolved"),
        "systemd-resolved is installed in the host image"
    );
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("linux-image-") && n.contains(&image.kernel_version)),
        "no linux-image package of kernel {} in the manifest",
        image.kernel_version
    );
}

#[test]
fn rootfs_tarball_matches_its_sha256_sidecar() {
    let rootfs = rootfs::require(&cache()).unwrap();
    let sidecar = fs::read_to_string(&rootfs.sha256_file).unwrap();
    let (hex, name) = sidecar.trim_end().split_once("  ").unwrap_or_else(|| {
        panic!(
            "{} is not `<hex>  <file>`: {sidecar:?}",
            rootfs.sha256_file.display()
        )
    });
    assert_eq!(name, rootfs::TARBALL);
    assert_eq!(hex.len(), 64, "{sidecar:?}");
    assert_eq!(
        hex,
        rootfs::sha256_file(&rootfs.tarball).unwrap(),
        "tarball and sidecar disagree"
    );
    assert_eq!(hex, rootfs.sha256, "image.json and sidecar disagree");
}

#[test]
fn rootfs_tarball_holds_containerd_runc_and_the_cni_bridge_and_no_device_nodes() {
    let rootfs = rootfs::require(&cache()).unwrap();
    let listing = agent::exec::run_stdout(Command::new("tar").arg("-tvzf").arg(&rootfs.tarball)).unwrap();
    let members: Vec<&str> = listing
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .collect();
    for wanted in [
        "./usr/bin/containerd",
        "./usr/bin/containerd-shim-runc-v2",
        "./usr/bin/ctr",
        "./usr/sbin/runc",
        "./usr/lib/cni/bridge",
        "./usr/lib/cni/host-local",
        "./usr/lib/cni/loopback",
        "./usr/lib/cni/portmap",
        "./usr/lib/systemd/systemd",
    ] {
        assert!(
            members.contains(&wanted),
            "{wanted} is not in {}",
            rootfs.tarball.display()
        );
    }
    // images/rootfs/path-exclude: what a node does not run stays out.
    for unwanted in [
        "./usr/bin/containerd-shim",
        "./usr/bin/containerd-shim-runc-v1",
        "./usr/lib/cni/dhcp",
        "./usr/lib/cni/macvlan",
    ] {
        assert!(
            !members.contains(&unwanted),
            "{unwanted} is in {} though images/rootfs/path-exclude leaves it out",
            rootfs.tarball.display()
        );
    }
    let devices: Vec<&str> = listing
        .lines()
        .filter(|l| l.starts_with('c') || l.starts_with('b'))
        .collect();
    assert!(devices.is_empty(), "device nodes in the tarball: {devices:?}");
    let names = manifest_packages(&fs::read_to_string(&rootfs.packages).unwrap());
    for wanted in [
        "containerd",
        "runc",
        "containernetworking-plugins",
        "ca-certificates",
        "systemd",
    ] {
        assert!(
            names.iter().any(|n| n == wanted),
            "{wanted} missing from {}",
            rootfs.packages.display()
        );
    }
    assert!(
        !names.iter().any(|n| n == "systemd-resolved"),
        "systemd-resolved is in the rootfs"
    );
}

#[test]
fn a_missing_image_makes_require_fail_naming_harness_images_build() {
    let dir = tempfile::tempdir().unwrap();
    let empty = Cache::at(dir.path().to_path_buf()).unwrap();
    let host_err = host::require(&empty).unwrap_err().to_string();
    assert!(host_err.contains("harness images build"), "{host_err}");
    assert!(host_err.contains(host::KIND), "{host_err}");
    let rootfs_err = rootfs::require(&empty).unwrap_err().to_string();
    assert!(rootfs_err.contains("harness images build"), "{rootfs_err}");
    assert!(rootfs_err.contains(rootfs::KIND), "{rootfs_err}");
}

/// `harness images list --output json` lists each cache entry as an object (kind, key, path,
/// bytes); an empty cache is an empty list.
#[test]
fn images_list_prints_json_with_each_entrys_kind_key_path_and_size() {
    let root = tempfile::tempdir().unwrap();
    let list = || {
        let out = agent::exec::run_stdout(
            Command::new(agent::test_binary!("harness"))
                .args(["images", "list", "--output", "json"])
                .env("LAB_CACHE_DIR", root.path()),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        serde_json::from_str::<serde_json::Value>(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
    };
    assert_eq!(list(), serde_json::json!([]));
    let entry = root.path().join("coredns").join("0123abcd");
    fs::create_dir_all(&entry).unwrap();
    fs::write(entry.join("coredns"), vec![0u8; 4096]).unwrap();
    let listed = list();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(listed[0]["kind"], "coredns");
    assert_eq!(listed[0]["key"], "0123abcd");
    assert_eq!(listed[0]["path"], entry.display().to_string());
    assert!(listed[0]["bytes"].as_u64().unwrap() >= 4096, "{listed}");
}
