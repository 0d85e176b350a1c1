//! The OCI image archives built by `harness images build` (`harness::images::oci`): each is an
//! OCI image layout whose index names the pinned ref and whose blobs match their digests; the
//! pause and busybox programs in the layers are static and run; a rebuild gives the same bytes;
//! containerd 1.7 from the machine rootfs imports both under their refs (root, chroot, no VM).
//!
//! These read the images (and the machine rootfs) from the lab cache (`$LAB_CACHE_DIR`, default
//! ~/.cache/unbounded-lab); when one is missing they fail, naming `harness images build`.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use harness::cache::Cache;
use harness::images::oci::{self, BUSYBOX_APPLETS, ManifestImage, OciImages, PAUSE_REF, TEST_IMAGE_REF};
use harness::images::oci_layout::ANNOTATION_CONTAINERD_NAME;
use oci_spec::image::{
    ANNOTATION_REF_NAME, Arch, ImageConfiguration, ImageIndex, ImageManifest, MediaType, Os,
};
use sha2::{Digest, Sha256};

fn images() -> OciImages {
    let cache = Cache::open().expect("the lab cache directory");
    oci::require(&cache).unwrap_or_else(|err| panic!("{}", agent::error_chain::Chain(&err)))
}

fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// One tar member: type, mode and contents (or link target).
#[derive(Debug)]
struct TarMember {
    kind: tar::EntryType,
    mode: u32,
    data: Vec<u8>,
    link: Option<String>,
}

/// Every member of a tar, checking each is owned by root with the recipe's mtime.
fn tar_members(bytes: &[u8]) -> BTreeMap<String, TarMember> {
    let epoch = oci::Recipe::pinned().unwrap().source_date_epoch;
    let mut members = BTreeMap::new();
    let mut archive = tar::Archive::new(bytes);
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let header = entry.header().clone();
        let path = entry.path().unwrap().to_string_lossy().into_owned();
        assert_eq!((header.uid().unwrap(), header.gid().unwrap()), (0, 0), "{path}");
        assert_eq!(header.mtime().unwrap(), epoch, "{path}");
        let mut data = Vec::new();
        entry.read_to_end(&mut data).unwrap();
        let link = entry
            .link_name()
            .unwrap()
            .map(|l| l.to_string_lossy().into_owned());
        members.insert(
            path,
            TarMember {
                kind: header.entry_type(),
                mode: header.mode().unwrap(),
                data,
                link,
            },
        );
    }
    members
}

/// An archive read back as an OCI image layout, every reference followed and checked.
struct Layout {
    index: ImageIndex,
    manifest: ImageManifest,
    config: ImageConfiguration,
    layer: BTreeMap<String, TarMember>,
}

fn read_layout(archive: &Path) -> Layout {
    let bytes = fs::read(archive).unwrap();
    let members = tar_members(&bytes);
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&members["oci-layout"].data).unwrap(),
        serde_json::json!({"imageLayoutVersion": "1.0.0"})
    );
    let blob = |digest: &oci_spec::image::Digest, size: u64| -> Vec<u8> {
        let name = format!("blobs/sha256/{}", digest.digest());
        let member = members
            .get(&name)
            .unwrap_or_else(|| panic!("{} has no {name}", archive.display()));
        assert_eq!(
            sha256_hex(&member.data),
            digest.digest(),
            "{name} does not match its digest"
        );
        assert_eq!(member.data.len() as u64, size, "{name}: size in its descriptor");
        member.data.clone()
    };
    let index: ImageIndex = serde_json::from_slice(&members["index.json"].data).unwrap();
    assert_eq!(index.manifests().len(), 1, "one image per archive");
    let desc = &index.manifests()[0];
    assert_eq!(desc.media_type(), &MediaType::ImageManifest);
    let manifest: ImageManifest = serde_json::from_slice(&blob(desc.digest(), desc.size())).unwrap();
    assert_eq!(manifest.config().media_type(), &MediaType::ImageConfig);
    let config: ImageConfiguration =
        serde_json::from_slice(&blob(manifest.config().digest(), manifest.config().size())).unwrap();
    assert_eq!(manifest.layers().len(), 1);
    let layer_desc = &manifest.layers()[0];
    assert_eq!(layer_desc.media_type(), &MediaType::ImageLayer);
    let layer = blob(layer_desc.digest(), layer_desc.size());
    assert_eq!(
        config.rootfs().diff_ids(),
        &[layer_desc.digest().to_string()],
        "an uncompressed layer's diff_id is its digest"
    );
    assert_eq!((config.architecture(), config.os()), (&Arch::Amd64, &Os::Linux));
    let blobs = members
        .keys()
        .filter(|k| k.starts_with("blobs/sha256/") && k.len() > 13)
        .count();
    assert_eq!(blobs, 3, "only the manifest, config and layer blobs");
    Layout {
        index,
        manifest,
        config,
        layer: tar_members(&layer),
    }
}

/// True for a static ELF executable: no PT_INTERP program header (no dynamic loader).
fn is_static_elf(data: &[u8]) -> bool {
    assert!(data.len() > 64 && &data[..4] == b"\x7fELF", "not an ELF file");
    assert_eq!(data[4], 2, "not a 64-bit ELF");
    let u16_at = |o: usize| u16::from_le_bytes([data[o], data[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(data[0x20..0x28].try_into().unwrap()) as usize;
    let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
    assert!(phnum > 0, "no program headers");
    (0..phnum).all(|i| {
        let o = phoff + i * phentsize;
        u32::from_le_bytes(data[o..o + 4].try_into().unwrap()) != 3 // PT_INTERP
    })
}

/// Writes a layer file out as an executable and runs it with `args`.
fn run_extracted(data: &[u8], name: &str, args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    fs::write(&path, data).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    agent::exec::run_stdout(Command::new(&path).args(args)).unwrap()
}

fn check_image(images: &OciImages, image: &ManifestImage) -> Layout {
    let path = images.path_of(image);
    let bytes = fs::read(&path).unwrap();
    assert_eq!(
        sha256_hex(&bytes),
        image.sha256,
        "{}: manifest.json sha256",
        path.display()
    );
    assert_eq!(bytes.len() as u64, image.size);
    let sidecar = fs::read_to_string(images.sidecar_of(image)).unwrap();
    let name = path.file_name().unwrap().to_string_lossy();
    assert_eq!(sidecar, format!("{}  {name}\n", image.sha256));
    let layout = read_layout(&path);
    let desc = &layout.index.manifests()[0];
    let annotations = desc.annotations().clone().unwrap_or_default();
    assert_eq!(
        annotations.get(ANNOTATION_CONTAINERD_NAME),
        Some(&image.reference),
        "containerd imports the image under this name"
    );
    let tag = image.reference.rsplit_once(':').unwrap().1;
    assert_eq!(
        annotations.get(ANNOTATION_REF_NAME).map(String::as_str),
        Some(tag)
    );
    let platform = desc.platform().as_ref().expect("the manifest's platform");
    assert_eq!(
        (platform.architecture(), platform.os()),
        (&Arch::Amd64, &Os::Linux)
    );
    assert_eq!(desc.digest().to_string(), image.manifest_digest);
    assert_eq!(layout.manifest.config().digest().to_string(), image.config_digest);
    assert_eq!(
        layout.manifest.layers()[0].digest().to_string(),
        image.layer_digest
    );
    layout
}

#[test]
fn manifest_pins_both_refs_with_their_archives_sha256() {
    let images = images();
    let refs: Vec<&str> = images
        .manifest
        .images
        .iter()
        .map(|i| i.reference.as_str())
        .collect();
    assert_eq!(refs, [PAUSE_REF, TEST_IMAGE_REF]);
    assert_eq!(images.manifest.arch, "amd64");
    for image in &images.manifest.images {
        assert_eq!(
            image.file,
            format!(
                "container-images/amd64/{}-{}.tar",
                image.name,
                image.reference.rsplit_once(':').unwrap().1
            )
        );
        check_image(&images, image);
    }
}

#[test]
fn pause_image_runs_a_static_pause_of_the_pinned_version_as_65535() {
    let images = images();
    let layout = check_image(&images, images.pause());
    assert_eq!(layout.layer.keys().collect::<Vec<_>>(), ["pause"]);
    let pause = &layout.layer["pause"];
    assert_eq!((pause.kind, pause.mode), (tar::EntryType::Regular, 0o755));
    assert!(
        is_static_elf(&pause.data),
        "/pause has a dynamic loader (PT_INTERP)"
    );
    let config = layout.config.config().as_ref().expect("image config");
    assert_eq!(config.entrypoint().as_deref(), Some(&["/pause".to_string()][..]));
    assert_eq!(config.user().as_deref(), Some("65535:65535"));
    let recipe = oci::Recipe::pinned().unwrap();
    assert_eq!(
        run_extracted(&pause.data, "pause", &["-v"]).trim(),
        format!(
            "pause.c v{}-k8s-v{}",
            recipe.pause_version, recipe.pause_module_version
        )
    );
}

#[test]
fn test_image_runs_a_static_busybox_with_its_applets_linked_in_bin() {
    let images = images();
    let layout = check_image(&images, images.test_image());
    let busybox = &layout.layer["bin/busybox"];
    assert_eq!((busybox.kind, busybox.mode), (tar::EntryType::Regular, 0o755));
    assert!(
        is_static_elf(&busybox.data),
        "/bin/busybox has a dynamic loader (PT_INTERP)"
    );
    for applet in BUSYBOX_APPLETS {
        let member = layout
            .layer
            .get(&format!("bin/{applet}"))
            .unwrap_or_else(|| panic!("no /bin/{applet}"));
        assert_eq!(
            (member.kind, member.link.as_deref()),
            (tar::EntryType::Symlink, Some("busybox")),
            "/bin/{applet}"
        );
    }
    assert_eq!(layout.layer["tmp/"].mode, 0o1777);
    assert!(String::from_utf8_lossy(&layout.layer["etc/passwd"].data).starts_with("root:x:0:0:"));
    let config = layout.config.config().as_ref().expect("image config");
    assert_eq!(config.cmd().as_deref(), Some(&["sh".to_string()][..]));
    let out = run_extracted(&busybox.data, "busybox", &["sh", "-c", "echo from-the-image"]);
    assert_eq!(out, "from-the-image\n");
    let listed = run_extracted(&busybox.data, "busybox", &["--list"]);
    for applet in BUSYBOX_APPLETS {
        assert!(
            listed.lines().any(|l| l == applet),
            "busybox has no applet {applet}"
        );
    }
}

#[test]
fn rebuilding_in_an_empty_cache_gives_identical_archives() {
    let cached = images();
    let tmp = tempfile::tempdir().unwrap();
    let rebuilt = oci::build(&Cache::at(tmp.path().to_path_buf()).unwrap()).unwrap();
    assert_eq!(rebuilt.manifest, cached.manifest);
    for image in &cached.manifest.images {
        assert_eq!(
            fs::read(rebuilt.path_of(image)).unwrap(),
            fs::read(cached.path_of(image)).unwrap(),
            "{}",
            image.file
        );
    }
}

/// Imports both archives with the containerd 1.7 of the machine rootfs, run in a chroot of
/// the extracted rootfs inside a private mount namespace (the `native` snapshotter; no VM).
const IMPORT_SCRIPT: &str = r#"set -eu
mount -t proc proc /proc
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /var/lib/containerd
containerd --address /run/c.sock --root /var/lib/containerd --state /run/containerd >/run/containerd.log 2>&1 &
pid=$!
for _ in $(seq 100); do [ -S /run/c.sock ] && break; sleep 0.1; done
for f in /images/*.tar; do ctr --address /run/c.sock -n k8s.io images import --snapshotter native "$f"; done
echo "--- images"
ctr --address /run/c.sock -n k8s.io images ls
kill "$pid"; wait "$pid" || true
"#;

#[test]
fn containerd_of_the_machine_rootfs_imports_both_archives_under_their_refs() {
    let cache = Cache::open().expect("the lab cache directory");
    let images = images();
    let rootfs = harness::images::rootfs::require(&cache)
        .unwrap_or_else(|err| panic!("{}", agent::error_chain::Chain(&err)));
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    fs::create_dir_all(root.join("images")).unwrap();
    agent::exec::run(
        Command::new("tar")
            .arg("-xzf")
            .arg(&rootfs.tarball)
            .arg("-C")
            .arg(&root),
    )
    .unwrap();
    fs::create_dir_all(root.join("dev")).unwrap();
    fs::create_dir_all(root.join("var/lib/containerd")).unwrap();
    for image in &images.manifest.images {
        let name = images.path_of(image).file_name().unwrap().to_owned();
        fs::copy(images.path_of(image), root.join("images").join(name)).unwrap();
    }
    fs::write(root.join("images/import.sh"), IMPORT_SCRIPT).unwrap();
    let inner = format!(
        "mount --rbind /dev '{root}/dev' && exec chroot '{root}' sh /images/import.sh",
        root = root.display()
    );
    let out = agent::exec::run_stdout(
        Command::new("timeout")
            .args([
                "120",
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
            ])
            .arg(&inner),
    )
    .unwrap_or_else(|err| panic!("{err}"));
    let (imports, listed) = out.split_once("--- images\n").unwrap_or_else(|| panic!("{out}"));
    for image in &images.manifest.images {
        assert!(
            imports.contains(&format!(
                "unpacking {} ({})...done",
                image.reference, image.manifest_digest
            )),
            "ctr did not import and unpack {}:\n{out}",
            image.reference
        );
        let row: Vec<&str> = listed
            .lines()
            .find(|l| l.split_whitespace().next() == Some(image.reference.as_str()))
            .unwrap_or_else(|| panic!("`ctr images ls` has no {}:\n{out}", image.reference))
            .split_whitespace()
            .collect();
        assert_eq!(row[2], image.manifest_digest, "{}", image.reference);
        assert!(row.contains(&"linux/amd64"), "{row:?}");
    }
}
