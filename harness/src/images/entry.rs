//! A built cache entry's files: the entry itself (or an error naming the command that builds it),
//! the JSON that describes it and the `.sha256` sidecars next to its files.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::error::{ImageError, io_err};
use crate::cache::{Cache, RecipeKey};

/// The built entry of `key`; when it is missing, an error naming `what` it holds and the
/// command that builds it (`image` is its name for `harness images build`: `host`, `oci`, ...).
pub fn require_built(
    cache: &Cache,
    kind: &str,
    key: &RecipeKey,
    what: &str,
    image: &str,
) -> Result<PathBuf, ImageError> {
    cache.lookup(kind, key).ok_or_else(|| ImageError::NotBuilt {
        what: what.to_string(),
        kind: kind.to_string(),
        key: key.hex(),
        root: cache.root().to_path_buf(),
        image: image.to_string(),
    })
}

/// Reads and parses a JSON file of an entry (`image.json`, `manifest.json`).
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T, ImageError> {
    let text = fs::read_to_string(path).map_err(io_err("reading", path))?;
    serde_json::from_str(&text).map_err(|source| ImageError::Json {
        what: format!("parsing {}", path.display()),
        source,
    })
}

/// Writes `value` as pretty JSON, with a final newline, to `path` (`image.json`, `build.json`).
pub fn write_json(path: &Path, value: &impl Serialize) -> Result<(), ImageError> {
    let text = serde_json::to_string_pretty(value).map_err(|source| ImageError::Json {
        what: format!("serializing {}", path.display()),
        source,
    })?;
    fs::write(path, text + "\n").map_err(io_err("writing", path))
}

/// `<path>.sha256`.
pub fn sidecar_of(path: &Path) -> PathBuf {
    let mut os = path.as_os_str().to_owned();
    os.push(".sha256");
    PathBuf::from(os)
}

/// The sha256 of a file's contents, in hex.
pub fn sha256_file(path: &Path) -> Result<String, ImageError> {
    agent::artifact::checksum::sha256_file(path).map_err(io_err("hashing", path))
}

/// Hashes `path` and writes `<path>.sha256` as `<hex>  <file name>` (as `sha256sum` does); returns its path.
pub fn write_sidecar(path: &Path) -> Result<PathBuf, ImageError> {
    let hex = sha256_file(path)?;
    write_sidecar_with(path, &hex)
}

/// The digest a `.sha256` sidecar holds, in either form (`<hex>  <file name>` or the bare hex).
pub fn read_hex_of(sidecar: &Path) -> Result<String, ImageError> {
    let text = fs::read_to_string(sidecar).map_err(io_err("reading", sidecar))?;
    let hex = text.split_whitespace().next().unwrap_or_default();
    if !agent::artifact::checksum::is_sha256_hex(hex) {
        return Err(ImageError::BadSidecar {
            path: sidecar.to_path_buf(),
            text,
        });
    }
    Ok(hex.to_string())
}

/// Writes `<path>.sha256` as `<hex>  <file name>` for a digest already known; returns its path.
pub fn write_sidecar_with(path: &Path, hex: &str) -> Result<PathBuf, ImageError> {
    let name = path
        .file_name()
        .ok_or_else(|| ImageError::NoFileName {
            path: path.to_path_buf(),
        })?
        .to_string_lossy();
    let sidecar = sidecar_of(path);
    fs::write(&sidecar, format!("{hex}  {name}\n")).map_err(io_err("writing", &sidecar))?;
    Ok(sidecar)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn require_built_names_what_is_missing_and_the_command_that_builds_it() {
        let tmp = tempfile::tempdir().unwrap();
        let cache = Cache::at(tmp.path().to_path_buf()).unwrap();
        let key = RecipeKey::new("t");
        let err = require_built(&cache, "t-kind", &key, "test thing", "t")
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            format!(
                "no test thing (t-kind {}) in {}: run `harness images build` (or `harness images build t`)",
                key.hex(),
                tmp.path().display()
            )
        );
        fs::create_dir_all(cache.entry_path("t-kind", &key)).unwrap();
        assert_eq!(
            require_built(&cache, "t-kind", &key, "test thing", "t").unwrap(),
            cache.entry_path("t-kind", &key)
        );
    }

    #[test]
    fn sidecar_is_the_digest_and_the_file_name_as_sha256sum_writes_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.tgz");
        fs::write(&path, "abc").unwrap();
        let sidecar = write_sidecar(&path).unwrap();
        assert_eq!(sidecar, dir.path().join("f.tgz.sha256"));
        assert_eq!(
            fs::read_to_string(&sidecar).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad  f.tgz\n"
        );
        assert_eq!(
            read_hex_of(&sidecar).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        fs::write(&sidecar, "\n").unwrap();
        let err = read_hex_of(&sidecar).unwrap_err();
        assert!(err.to_string().contains("not a SHA-256 hex digest"), "{err}");
    }

    #[test]
    fn read_json_names_the_file_it_cannot_parse() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("image.json");
        fs::write(&path, "{").unwrap();
        let err = read_json::<serde_json::Value>(&path).unwrap_err();
        assert_eq!(err.to_string(), format!("parsing {}", path.display()));
        let err = read_json::<serde_json::Value>(&dir.path().join("none.json")).unwrap_err();
        assert!(err.to_string().starts_with("reading "), "{err}");
    }
}
