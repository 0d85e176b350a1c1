//! A VM's own qcow2 overlay on the read-only base image (`qemu-img create -b`), with the
//! base's virtual size (a smaller overlay would truncate the guest's filesystem).

use std::path::Path;
use std::process::Command;

use agent::exec::{self, CommandFailed};

/// What `qemu-img info` says about an image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageInfo {
    pub format: String,
    pub virtual_size: u64,
}

/// Why an overlay could not be made.
#[derive(Debug, thiserror::Error)]
pub enum OverlayError {
    #[error("base image {0} does not exist: run `harness images build`")]
    MissingBase(String),
    #[error(transparent)]
    Command(#[from] CommandFailed),
    #[error("`qemu-img info` on {path} gave unexpected output: {why}")]
    BadInfo { path: String, why: String },
    #[error("overlay {overlay} has virtual size {overlay_size}, its base {base} has {base_size}")]
    SizeMismatch {
        overlay: String,
        overlay_size: u64,
        base: String,
        base_size: u64,
    },
}

/// Reads an image's format and virtual size.
pub fn info(path: &Path) -> Result<ImageInfo, OverlayError> {
    let text = exec::run_stdout(
        Command::new("qemu-img")
            .args(["info", "--output=json", "-U"])
            .arg(path),
    )?;
    parse_info(&text).map_err(|why| OverlayError::BadInfo {
        path: path.display().to_string(),
        why,
    })
}

fn parse_info(text: &str) -> Result<ImageInfo, String> {
    let json: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let format = json["format"].as_str().ok_or("no \"format\"")?.to_string();
    let virtual_size = json["virtual-size"].as_u64().ok_or("no \"virtual-size\"")?;
    Ok(ImageInfo { format, virtual_size })
}

/// Creates `overlay` (replacing any old one) backed by `base`, with the same virtual size.
pub fn create(base: &Path, overlay: &Path) -> Result<(), OverlayError> {
    if !base.is_file() {
        return Err(OverlayError::MissingBase(base.display().to_string()));
    }
    let base_info = info(base)?;
    let _ = std::fs::remove_file(overlay);
    let base = std::fs::canonicalize(base).unwrap_or_else(|_| base.to_path_buf());
    exec::run(
        Command::new("qemu-img")
            .args(["create", "-q", "-f", "qcow2", "-F", &base_info.format, "-b"])
            .arg(&base)
            .arg(overlay)
            .arg(base_info.virtual_size.to_string()),
    )?;
    let made = info(overlay)?;
    if made.virtual_size != base_info.virtual_size {
        return Err(OverlayError::SizeMismatch {
            overlay: overlay.display().to_string(),
            overlay_size: made.virtual_size,
            base: base.display().to_string(),
            base_size: base_info.virtual_size,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_info_reads_format_and_virtual_size() {
        let info =
            parse_info(r#"{"virtual-size": 8589934592, "format": "qcow2", "actual-size": 1}"#).unwrap();
        assert_eq!(info.format, "qcow2");
        assert_eq!(info.virtual_size, 8 << 30);
        assert!(parse_info("{}").unwrap_err().contains("format"));
    }

    #[test]
    fn overlay_has_the_base_size_and_leaves_the_base_untouched() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("base.qcow2");
        exec::run(
            Command::new("qemu-img")
                .args(["create", "-q", "-f", "qcow2"])
                .arg(&base)
                .arg("64M"),
        )
        .unwrap();
        let before = std::fs::read(&base).unwrap();
        let overlay = tmp.path().join("vm.qcow2");
        create(&base, &overlay).unwrap();
        assert_eq!(info(&overlay).unwrap().virtual_size, 64 << 20);
        assert_eq!(std::fs::read(&base).unwrap(), before);
        create(&base, &overlay).unwrap();
    }

    #[test]
    fn missing_base_names_the_build_command() {
        let tmp = tempfile::tempdir().unwrap();
        let err = create(&tmp.path().join("nope.qcow2"), &tmp.path().join("o.qcow2")).unwrap_err();
        assert!(err.to_string().contains("harness images build"), "{err}");
    }
}
