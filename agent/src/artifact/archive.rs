//! Extracting the one binary from a release tarball (`.tgz`/`.tar.gz`).
//!
//! Only a single regular file with the expected name at the top level is
//! accepted (`coredns` or `./coredns`), bounded in size. Links, `..`,
//! absolute paths, devices, directories, other or extra members and empty
//! archives are refused; nothing outside the given output file is written.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::Path;

use flate2::read::GzDecoder;
use tar::EntryType;

/// Copies the archive's single member `member` into `out`; returns its size.
/// The error text says which member was refused and why.
pub fn extract_single_member(
    archive: &Path,
    member: &str,
    out: &mut dyn Write,
    max_bytes: u64,
) -> Result<u64, String> {
    let file = File::open(archive).map_err(|e| format!("cannot open it: {e}"))?;
    let mut tar = tar::Archive::new(GzDecoder::new(file));
    let entries = tar
        .entries()
        .map_err(|e| format!("not a gzip-compressed tar archive: {e}"))?;
    let mut extracted: Option<(String, u64)> = None;
    for entry in entries {
        let mut entry = entry.map_err(|e| format!("not a readable gzip-compressed tar archive: {e}"))?;
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        if let Some((first, _)) = &extracted {
            return Err(format!(
                "it holds more than one member ({first:?} and {name:?}); exactly one regular file {member:?} is allowed"
            ));
        }
        check_name(&name, member)?;
        check_type(&name, entry.header().entry_type())?;
        let size = entry
            .header()
            .size()
            .map_err(|e| format!("member {name:?} has a bad size: {e}"))?;
        if size > max_bytes {
            return Err(format!(
                "member {name:?} is {size} bytes, more than the limit of {max_bytes}"
            ));
        }
        let copied = io::copy(&mut (&mut entry).take(max_bytes + 1), out)
            .map_err(|e| format!("member {name:?} could not be read: {e}"))?;
        if copied != size {
            return Err(format!("member {name:?} is truncated: {copied} of {size} bytes"));
        }
        extracted = Some((name, copied));
    }
    match extracted {
        Some((_, size)) => Ok(size),
        None => Err(format!(
            "it holds no member; expected one regular file {member:?}"
        )),
    }
}

fn check_name(name: &str, member: &str) -> Result<(), String> {
    if name.starts_with('/') {
        return Err(format!("member {name:?} is an absolute path"));
    }
    if name.split('/').any(|part| part == "..") {
        return Err(format!("member {name:?} climbs out of the archive (\"..\")"));
    }
    if name != member && name != format!("./{member}") {
        return Err(format!(
            "member {name:?} is not the single top-level file {member:?}"
        ));
    }
    Ok(())
}

fn check_type(name: &str, kind: EntryType) -> Result<(), String> {
    let what = match kind {
        EntryType::Regular | EntryType::Continuous => return Ok(()),
        EntryType::Symlink => "a symbolic link",
        EntryType::Link => "a hard link",
        EntryType::Char => "a character device",
        EntryType::Block => "a block device",
        EntryType::Directory => "a directory",
        EntryType::Fifo => "a FIFO",
        _ => "not a regular file",
    };
    Err(format!("member {name:?} is {what}, not a regular file"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::Compression;
    use flate2::write::GzEncoder;

    fn tarball(dir: &Path, build: impl FnOnce(&mut tar::Builder<GzEncoder<File>>)) -> std::path::PathBuf {
        let path = dir.join("a.tgz");
        let mut builder =
            tar::Builder::new(GzEncoder::new(File::create(&path).unwrap(), Compression::fast()));
        build(&mut builder);
        builder.into_inner().unwrap().finish().unwrap();
        path
    }

    fn header(name: &str, kind: EntryType, size: u64) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(0o755);
        // set_path refuses `..` and absolute paths: write the raw name field.
        let field = &mut h.as_old_mut().name;
        field.fill(0);
        field[..name.len()].copy_from_slice(name.as_bytes());
        if kind == EntryType::Symlink {
            h.set_link_name("/bin/sh").unwrap();
        }
        h.set_cksum();
        h
    }

    fn extract(path: &Path) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        extract_single_member(path, "coredns", &mut out, 1024).map(|_| out)
    }

    #[test]
    fn single_regular_member_is_extracted() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["coredns", "./coredns"] {
            let path = tarball(dir.path(), |b| {
                b.append(&header(name, EntryType::Regular, 3), &b"abc"[..])
                    .unwrap()
            });
            assert_eq!(extract(&path).unwrap(), b"abc");
        }
    }

    #[test]
    fn refusals_name_the_member_and_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let cases: [(&str, EntryType, &str); 6] = [
            ("../coredns", EntryType::Regular, "climbs out"),
            ("/coredns", EntryType::Regular, "absolute path"),
            ("bin/coredns", EntryType::Regular, "not the single top-level file"),
            ("coredns", EntryType::Symlink, "symbolic link"),
            ("coredns", EntryType::Char, "character device"),
            ("coredns", EntryType::Directory, "directory"),
        ];
        for (name, kind, reason) in cases {
            let size = if kind == EntryType::Regular { 3 } else { 0 };
            let path = tarball(dir.path(), |b| {
                b.append(&header(name, kind, size), &b"abc"[..size as usize])
                    .unwrap()
            });
            let err = extract(&path).unwrap_err();
            assert!(err.contains(reason) && err.contains(name), "{name}: {err}");
        }
    }

    #[test]
    fn extra_member_empty_archive_and_oversize_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let two = tarball(dir.path(), |b| {
            b.append(&header("coredns", EntryType::Regular, 1), &b"a"[..])
                .unwrap();
            b.append(&header("README", EntryType::Regular, 1), &b"b"[..])
                .unwrap();
        });
        assert!(
            extract(&two)
                .unwrap_err()
                .contains("more than one member (\"coredns\" and \"README\")")
        );
        let twice = tarball(dir.path(), |b| {
            b.append(&header("coredns", EntryType::Regular, 1), &b"a"[..])
                .unwrap();
            b.append(&header("./coredns", EntryType::Regular, 1), &b"b"[..])
                .unwrap();
        });
        assert!(extract(&twice).unwrap_err().contains("more than one member"));
        let empty = tarball(dir.path(), |_| {});
        assert!(extract(&empty).unwrap_err().contains("holds no member"));
        let big = tarball(dir.path(), |b| {
            b.append(&header("coredns", EntryType::Regular, 2000), &[0u8; 2000][..])
                .unwrap()
        });
        assert!(extract(&big).unwrap_err().contains("more than the limit of 1024"));
    }

    #[test]
    fn non_gzip_input_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plain");
        std::fs::write(&path, b"#!/bin/sh\n").unwrap();
        assert!(
            extract(&path).unwrap_err().contains("gzip"),
            "{:?}",
            extract(&path)
        );
    }
}
