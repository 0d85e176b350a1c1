//! One container image as an OCI image layout (image-spec v1.1) inside a tar archive, the form
//! `ctr -n k8s.io images import` reads: `oci-layout`, `index.json` and `blobs/sha256/<hex>`.
//!
//! No container engine: the single layer is an uncompressed tar built here from a list of
//! entries, and the config, manifest and index are `oci-spec` types. Every tar member is root
//! owned with one fixed mtime and every JSON document has sorted keys, so the same inputs give
//! the same bytes. `index.json` names the image twice, as containerd and Docker do:
//! `io.containerd.image.name` holds the whole ref (what containerd imports it as) and
//! `org.opencontainers.image.ref.name` its tag.

use std::path::{Path, PathBuf};

use oci_spec::image::{
    ANNOTATION_REF_NAME, Arch, ConfigBuilder, Descriptor, DescriptorBuilder, Digest,
    ImageConfigurationBuilder, ImageIndexBuilder, ImageManifestBuilder, MediaType, OciLayoutBuilder, Os,
    PlatformBuilder, RootFsBuilder, Sha256Digest,
};
use serde::Serialize;
use sha2::{Digest as _, Sha256};

use super::error::{ImageError, io_err};

/// The annotation containerd takes an imported image's name from.
pub const ANNOTATION_CONTAINERD_NAME: &str = "io.containerd.image.name";

/// What one layer member is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Member {
    Dir { mode: u32 },
    File { mode: u32, data: Vec<u8> },
    Symlink { target: String },
}

/// One member of the layer, at `path` (relative, no leading `/`, e.g. `bin/sh`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerEntry {
    pub path: String,
    pub member: Member,
}

impl LayerEntry {
    pub fn dir(path: &str, mode: u32) -> LayerEntry {
        LayerEntry {
            path: path.to_string(),
            member: Member::Dir { mode },
        }
    }

    pub fn file(path: &str, mode: u32, data: Vec<u8>) -> LayerEntry {
        LayerEntry {
            path: path.to_string(),
            member: Member::File { mode, data },
        }
    }

    pub fn symlink(path: &str, target: &str) -> LayerEntry {
        LayerEntry {
            path: path.to_string(),
            member: Member::Symlink {
                target: target.to_string(),
            },
        }
    }
}

/// What goes into one image.
#[derive(Clone, Debug, Default)]
pub struct ImageSpec {
    /// The full ref, `registry.k8s.io/pause:3.10.1`.
    pub reference: String,
    pub entries: Vec<LayerEntry>,
    pub entrypoint: Option<Vec<String>>,
    pub cmd: Option<Vec<String>>,
    pub user: Option<String>,
    pub env: Vec<String>,
    /// mtime of every tar member (layer and archive).
    pub mtime: u64,
}

/// An image archive as written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WrittenImage {
    pub reference: String,
    /// The archive.
    pub path: PathBuf,
    /// sha256 of the archive, hex.
    pub sha256: String,
    pub size: u64,
    /// `sha256:<hex>` of the manifest, the config and the (uncompressed) layer.
    pub manifest_digest: String,
    pub config_digest: String,
    pub layer_digest: String,
}

/// The tag of a ref (`3.10.1` of `registry.k8s.io/pause:3.10.1`); `None` without one.
pub fn tag_of(reference: &str) -> Option<&str> {
    let last = reference.rsplit('/').next()?;
    let (_, tag) = last.split_once(':')?;
    (!tag.is_empty() && !reference.contains('@')).then_some(tag)
}

/// Writes the image's OCI layout archive to `path`.
pub fn write_archive(spec: &ImageSpec, path: &Path) -> Result<WrittenImage, ImageError> {
    let tag = tag_of(&spec.reference).ok_or_else(|| ImageError::NoTag {
        reference: spec.reference.clone(),
    })?;
    let layer = layer_tar(&spec.entries, spec.mtime).map_err(|e| ImageError::Layer(Box::new(e)))?;
    let (layer_digest, layer_hex) = digest(&layer)?;

    let mut config = ConfigBuilder::default();
    if let Some(entrypoint) = &spec.entrypoint {
        config = config.entrypoint(entrypoint.clone());
    }
    if let Some(cmd) = &spec.cmd {
        config = config.cmd(cmd.clone());
    }
    if let Some(user) = &spec.user {
        config = config.user(user.clone());
    }
    if !spec.env.is_empty() {
        config = config.env(spec.env.clone());
    }
    let image_config = ImageConfigurationBuilder::default()
        .architecture(Arch::Amd64)
        .os(Os::Linux)
        .config(config.build()?)
        .rootfs(
            RootFsBuilder::default()
                .typ("layers")
                .diff_ids(vec![layer_digest.to_string()])
                .build()?,
        )
        .build()?;
    let config_json = canonical_json(&image_config)?;
    let (config_digest, config_hex) = digest(&config_json)?;

    let manifest = ImageManifestBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageManifest)
        .config(descriptor(
            MediaType::ImageConfig,
            &config_json,
            config_digest.clone(),
        )?)
        .layers(vec![descriptor(
            MediaType::ImageLayer,
            &layer,
            layer_digest.clone(),
        )?])
        .build()?;
    let manifest_json = canonical_json(&manifest)?;
    let (manifest_digest, manifest_hex) = digest(&manifest_json)?;

    let index = ImageIndexBuilder::default()
        .schema_version(2u32)
        .media_type(MediaType::ImageIndex)
        .manifests(vec![
            DescriptorBuilder::default()
                .media_type(MediaType::ImageManifest)
                .digest(manifest_digest.clone())
                .size(manifest_json.len() as u64)
                .platform(
                    PlatformBuilder::default()
                        .architecture(Arch::Amd64)
                        .os(Os::Linux)
                        .build()?,
                )
                .annotations(
                    [
                        (ANNOTATION_CONTAINERD_NAME.to_string(), spec.reference.clone()),
                        (ANNOTATION_REF_NAME.to_string(), tag.to_string()),
                    ]
                    .into_iter()
                    .collect::<std::collections::HashMap<_, _>>(),
                )
                .build()?,
        ])
        .build()?;
    let layout = OciLayoutBuilder::default()
        .image_layout_version("1.0.0")
        .build()?;

    let mut blobs = [
        (layer_hex, layer),
        (config_hex, config_json),
        (manifest_hex.clone(), manifest_json),
    ];
    blobs.sort_by(|a, b| a.0.cmp(&b.0));
    let mut outer = tar::Builder::new(Vec::new());
    append(
        &mut outer,
        "oci-layout",
        &Member::file(canonical_json(&layout)?),
        spec.mtime,
    )?;
    append(
        &mut outer,
        "index.json",
        &Member::file(canonical_json(&index)?),
        spec.mtime,
    )?;
    append(&mut outer, "blobs/", &Member::Dir { mode: 0o755 }, spec.mtime)?;
    append(
        &mut outer,
        "blobs/sha256/",
        &Member::Dir { mode: 0o755 },
        spec.mtime,
    )?;
    for (hex, data) in blobs {
        append(
            &mut outer,
            &format!("blobs/sha256/{hex}"),
            &Member::File { mode: 0o644, data },
            spec.mtime,
        )?;
    }
    let archive = outer.into_inner().map_err(|source| ImageError::Tar {
        what: "ending the archive".into(),
        source,
    })?;
    let sha256 = hex::encode(Sha256::digest(&archive));
    std::fs::write(path, &archive).map_err(io_err("writing", path))?;
    Ok(WrittenImage {
        reference: spec.reference.clone(),
        path: path.to_path_buf(),
        sha256,
        size: archive.len() as u64,
        manifest_digest: manifest_digest.to_string(),
        config_digest: config_digest.to_string(),
        layer_digest: layer_digest.to_string(),
    })
}

impl Member {
    fn file(data: Vec<u8>) -> Member {
        Member::File { mode: 0o644, data }
    }
}

/// The layer: an uncompressed tar of `entries`, in the order given.
pub fn layer_tar(entries: &[LayerEntry], mtime: u64) -> Result<Vec<u8>, ImageError> {
    let mut tar = tar::Builder::new(Vec::new());
    for entry in entries {
        if entry.path.starts_with('/') || entry.path.split('/').any(|p| p == "..") {
            return Err(ImageError::LayerPath {
                path: entry.path.clone(),
            });
        }
        let path = match entry.member {
            Member::Dir { .. } if !entry.path.ends_with('/') => format!("{}/", entry.path),
            _ => entry.path.clone(),
        };
        append(&mut tar, &path, &entry.member, mtime)?;
    }
    tar.into_inner().map_err(|source| ImageError::Tar {
        what: "ending the layer".into(),
        source,
    })
}

/// One ustar member owned by 0:0 with `mtime`.
fn append(
    tar: &mut tar::Builder<Vec<u8>>,
    path: &str,
    member: &Member,
    mtime: u64,
) -> Result<(), ImageError> {
    let tar_err = |what: String| move |source| ImageError::Tar { what, source };
    let mut header = tar::Header::new_ustar();
    header
        .set_path(path)
        .map_err(tar_err(format!("tar member {path:?}")))?;
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(mtime);
    let data: &[u8] = match member {
        Member::Dir { mode } => {
            header.set_entry_type(tar::EntryType::Directory);
            header.set_mode(*mode);
            &[]
        }
        Member::File { mode, data } => {
            header.set_entry_type(tar::EntryType::Regular);
            header.set_mode(*mode);
            data
        }
        Member::Symlink { target } => {
            header.set_entry_type(tar::EntryType::Symlink);
            header.set_mode(0o777);
            header
                .set_link_name(target)
                .map_err(tar_err(format!("tar member {path:?} -> {target:?}")))?;
            &[]
        }
    };
    header.set_size(data.len() as u64);
    header.set_cksum();
    tar.append(&header, data)
        .map_err(tar_err(format!("tar member {path:?}")))
}

fn descriptor(media_type: MediaType, data: &[u8], digest: Digest) -> Result<Descriptor, ImageError> {
    Ok(DescriptorBuilder::default()
        .media_type(media_type)
        .digest(digest)
        .size(data.len() as u64)
        .build()?)
}

/// The sha256 of `data` as an OCI digest (`sha256:<hex>`) and as bare hex.
fn digest(data: &[u8]) -> Result<(Digest, String), ImageError> {
    let hex = hex::encode(Sha256::digest(data));
    let digest: Sha256Digest = hex.parse()?;
    Ok((digest.into(), hex))
}

/// Compact JSON with every object's keys sorted (`oci-spec` keeps annotations in a `HashMap`).
pub fn canonical_json(value: &impl Serialize) -> Result<Vec<u8>, ImageError> {
    fn sort(value: serde_json::Value) -> serde_json::Value {
        match value {
            serde_json::Value::Object(map) => {
                let mut pairs: Vec<_> = map.into_iter().collect();
                pairs.sort_by(|a, b| a.0.cmp(&b.0));
                serde_json::Value::Object(pairs.into_iter().map(|(k, v)| (k, sort(v))).collect())
            }
            serde_json::Value::Array(items) => {
                serde_json::Value::Array(items.into_iter().map(sort).collect())
            }
            other => other,
        }
    }
    let json = |source| ImageError::Json {
        what: "writing an OCI document as JSON".into(),
        source,
    };
    serde_json::to_vec(&sort(serde_json::to_value(value).map_err(json)?)).map_err(json)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> ImageSpec {
        ImageSpec {
            reference: "lab.example/thing:1.0".into(),
            entries: vec![
                LayerEntry::dir("bin", 0o755),
                LayerEntry::file("bin/prog", 0o755, b"\x7fELF fake".to_vec()),
                LayerEntry::symlink("bin/sh", "prog"),
            ],
            entrypoint: Some(vec!["/bin/prog".into()]),
            env: vec!["PATH=/bin".into()],
            user: Some("65535:65535".into()),
            mtime: 1_776_276_082,
            ..Default::default()
        }
    }

    #[test]
    fn tag_is_the_part_after_the_last_colon_of_the_last_path_segment() {
        assert_eq!(tag_of("registry.k8s.io/pause:3.10.1"), Some("3.10.1"));
        assert_eq!(tag_of("localhost:5000/busybox:1.35.0"), Some("1.35.0"));
        assert_eq!(tag_of("localhost:5000/busybox"), None);
        assert_eq!(tag_of("busybox:"), None);
    }

    #[test]
    fn same_spec_gives_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let a = write_archive(&spec(), &dir.path().join("a.tar")).unwrap();
        let b = write_archive(&spec(), &dir.path().join("b.tar")).unwrap();
        assert_eq!(std::fs::read(&a.path).unwrap(), std::fs::read(&b.path).unwrap());
        assert_eq!((a.sha256.clone(), a.size), (b.sha256, b.size));
        for digest in [&a.manifest_digest, &a.config_digest, &a.layer_digest] {
            assert!(digest.starts_with("sha256:") && digest.len() == 71, "{digest}");
        }
        let mut other = spec();
        other.mtime += 1;
        let c = write_archive(&other, &dir.path().join("c.tar")).unwrap();
        assert_ne!(a.layer_digest, c.layer_digest);
    }

    #[test]
    fn layer_members_are_root_owned_with_the_fixed_mtime() {
        let layer = layer_tar(&spec().entries, 42).unwrap();
        let mut archive = tar::Archive::new(&layer[..]);
        let seen: Vec<(String, tar::EntryType, u32, u64)> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let h = e.header();
                assert_eq!((h.uid().unwrap(), h.gid().unwrap()), (0, 0));
                (
                    e.path().unwrap().to_string_lossy().into_owned(),
                    h.entry_type(),
                    h.mode().unwrap(),
                    h.mtime().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("bin/".to_string(), tar::EntryType::Directory, 0o755, 42),
                ("bin/prog".to_string(), tar::EntryType::Regular, 0o755, 42),
                ("bin/sh".to_string(), tar::EntryType::Symlink, 0o777, 42),
            ]
        );
    }

    #[test]
    fn a_ref_without_a_tag_or_an_escaping_path_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut bad = spec();
        bad.reference = "lab.example/thing".into();
        let err = write_archive(&bad, &dir.path().join("x.tar")).unwrap_err();
        assert!(err.to_string().contains("has no tag"), "{err}");
        let err = layer_tar(&[LayerEntry::dir("../etc", 0o755)], 0).unwrap_err();
        assert!(err.to_string().contains("without `..`"), "{err}");
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_level() {
        let value = serde_json::json!({"b": {"z": 1, "a": [{"y": 1, "x": 2}]}, "a": 0});
        assert_eq!(
            String::from_utf8(canonical_json(&value).unwrap()).unwrap(),
            r#"{"a":0,"b":{"a":[{"x":2,"y":1}],"z":1}}"#
        );
    }
}
