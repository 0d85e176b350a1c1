//! SHA-256 sidecars (`<hex>  <name>` as `sha256sum` writes, or the bare hex as
//! `dl.k8s.io` serves) and file digests.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use sha2::{Digest, Sha256};

/// The digest a sidecar announces for `file_name`, lower-case.
///
/// Accepts one bare hex digest, or `sha256sum` lines (`<hex>  <name>`,
/// `<hex> *<name>`). A single line is the digest whatever name it gives (a
/// mirror may rename the file; the digest still has to match); with several
/// lines, the one naming `file_name` counts.
pub fn parse_sidecar(text: &str, file_name: Option<&str>) -> Result<String, String> {
    let lines: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    if lines.is_empty() {
        return Err("it is empty".into());
    }
    let mut named = Vec::new();
    for line in &lines {
        let mut parts = line.splitn(2, char::is_whitespace);
        let hex = parts.next().unwrap_or_default();
        let name = parts.next().map(|n| n.trim().trim_start_matches('*'));
        if hex.len() != 64 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(format!("{line:?} does not start with a 64-digit hex SHA-256"));
        }
        named.push((hex.to_ascii_lowercase(), name.filter(|n| !n.is_empty())));
    }
    if let [(hex, _)] = named.as_slice() {
        return Ok(hex.clone());
    }
    let wanted = file_name.unwrap_or_default();
    let mut found = named.iter().filter(|(_, name)| *name == Some(wanted));
    match (found.next(), found.next()) {
        (Some((hex, _)), None) => Ok(hex.clone()),
        (Some(_), Some(_)) => Err(format!("it names {wanted:?} more than once")),
        (None, _) => {
            let names: Vec<&str> = named.iter().map(|(_, n)| n.unwrap_or("<no name>")).collect();
            Err(format!("it names {names:?}, not {wanted:?}"))
        }
    }
}

/// The lower-case hex SHA-256 of a file's contents.
pub fn sha256_file(path: &Path) -> io::Result<String> {
    let mut file = File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// The lower-case hex SHA-256 of `bytes`.
pub fn sha256_bytes(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// True when `text` is a 64-digit hex digest (for pinned `SHA256` fields).
pub fn is_sha256_hex(text: &str) -> bool {
    text.len() == 64 && text.chars().all(|c| c.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

    #[test]
    fn sha256sum_style_line_is_accepted_for_its_file() {
        let text = format!("{HEX}  coredns_1.15.0_linux_amd64.tgz\n");
        assert_eq!(
            parse_sidecar(&text, Some("coredns_1.15.0_linux_amd64.tgz")).unwrap(),
            HEX
        );
        let binary_mode = format!("{HEX} *coredns\n");
        assert_eq!(parse_sidecar(&binary_mode, Some("coredns")).unwrap(), HEX);
    }

    #[test]
    fn bare_hex_is_accepted_and_lowercased() {
        assert_eq!(parse_sidecar(&HEX.to_uppercase(), Some("kubelet")).unwrap(), HEX);
    }

    #[test]
    fn a_single_line_is_the_digest_even_for_a_renamed_file() {
        assert_eq!(
            parse_sidecar(&format!("{HEX}  other.tgz"), Some("coredns.tgz")).unwrap(),
            HEX
        );
    }

    #[test]
    fn several_lines_none_naming_the_file_are_refused() {
        let text = format!("{HEX}  a.tgz\n{HEX}  b.tgz\n");
        let err = parse_sidecar(&text, Some("coredns.tgz")).unwrap_err();
        assert!(err.contains("a.tgz") && err.contains("coredns.tgz"), "{err}");
    }

    #[test]
    fn the_matching_line_of_a_multi_file_sidecar_counts() {
        let other = "0".repeat(64);
        let text = format!("{other}  a\n{HEX}  b\n");
        assert_eq!(parse_sidecar(&text, Some("b")).unwrap(), HEX);
    }

    #[test]
    fn empty_and_non_hex_sidecars_are_refused() {
        assert_eq!(parse_sidecar(" \n", None).unwrap_err(), "it is empty");
        assert!(
            parse_sidecar("<html>404</html>", None)
                .unwrap_err()
                .contains("64-digit hex")
        );
        assert!(parse_sidecar(&HEX[..63], None).is_err());
    }

    #[test]
    fn file_digest_matches_known_value() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "test").unwrap();
        assert_eq!(sha256_file(&path).unwrap(), HEX);
    }
}
