//! Checks of single values outside `LocalDNS`: URLs, checksums, tokens, labels, taints.

use base64::Engine as _;

/// `http://` or `https://` followed by a host, without whitespace or control characters.
pub fn url(s: &str) -> Result<(), String> {
    let rest = s.strip_prefix("https://").or_else(|| s.strip_prefix("http://"));
    match rest {
        None => Err(format!("{s:?} is not an http:// or https:// URL")),
        Some(r) if r.is_empty() || r.starts_with('/') => Err(format!("{s:?} has no host")),
        Some(_) if s.chars().any(|c| c.is_whitespace() || c.is_control()) => {
            Err(format!("{s:?} contains whitespace or control characters"))
        }
        Some(_) => Ok(()),
    }
}

/// An artifact's address: [`url`], and `https://` unless its source's `AllowHTTP` (the field
/// `allow_field`) is `true`; plain http lets anyone on the way swap the file and its sidecar.
pub fn source_url(s: &str, allow_http: bool, allow_field: &str) -> Result<(), String> {
    url(s)?;
    if allow_http || s.starts_with("https://") {
        Ok(())
    } else {
        Err(format!(
            "{s:?} is plain http, which this source does not allow: use https://, \
             or set {allow_field} to true to fetch it without TLS"
        ))
    }
}

/// `OfflineArtifacts.Source`: the bundle directory, exactly what `start` reads
/// ([`crate::artifact::offline::bundle_dir`]): an absolute path or a `file://` URL. An offline
/// bundle is never fetched, so an http(s) URL is refused here rather than by `start`.
pub fn offline_source(s: &str) -> Result<(), String> {
    one_line(s)?;
    crate::artifact::offline::bundle_dir(s).map(drop).map_err(|_| {
        format!(
            "{s:?} is not a local directory: give an absolute path or a file:// URL \
             (an offline bundle is read in place, never downloaded)"
        )
    })
}

/// An `https://` URL (the API server).
pub fn https_url(s: &str) -> Result<(), String> {
    url(s)?;
    if s.starts_with("https://") {
        Ok(())
    } else {
        Err(format!("{s:?} must use https://"))
    }
}

/// 64 hex digits; returned lowercase.
pub fn sha256(s: &str) -> Result<String, String> {
    if s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(s.to_ascii_lowercase())
    } else {
        Err(format!("{s:?} is not a SHA-256 digest (64 hex digits)"))
    }
}

/// A Kubernetes bootstrap token, `[a-z0-9]{6}.[a-z0-9]{16}`.
pub fn bootstrap_token(s: &str) -> Result<(), String> {
    let ok =
        |p: &str, n: usize| p.len() == n && p.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    match s.split_once('.') {
        Some((id, secret)) if ok(id, 6) && ok(secret, 16) => Ok(()),
        // The token is a secret: never echo it.
        _ => Err("is not a bootstrap token ([a-z0-9]{6}.[a-z0-9]{16})".to_owned()),
    }
}

/// Base64 of a PEM certificate bundle.
pub fn ca_cert_base64(s: &str) -> Result<(), String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .map_err(|e| format!("is not valid base64: {e}"))?;
    if String::from_utf8_lossy(&bytes).contains("-----BEGIN CERTIFICATE-----") {
        Ok(())
    } else {
        Err("does not decode to a PEM certificate (no \"-----BEGIN CERTIFICATE-----\")".to_owned())
    }
}

fn label_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// A label or taint key: `[prefix/]name`, prefix a DNS name.
pub fn label_key(s: &str) -> Result<(), String> {
    let (prefix, name) = match s.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    let prefix_ok = prefix.is_none_or(|p| p.parse::<crate::names::DnsName>().is_ok());
    if prefix_ok && label_name(name) {
        Ok(())
    } else {
        Err(format!(
            "{s:?} is not a label key ([prefix/]name, name 1-63 of [A-Za-z0-9._-])"
        ))
    }
}

/// A label value: empty or 1–63 of `[A-Za-z0-9._-]`, alphanumeric at both ends.
pub fn label_value(s: &str) -> Result<(), String> {
    if s.is_empty() || label_name(s) {
        Ok(())
    } else {
        Err(format!("{s:?} is not a label value (up to 63 of [A-Za-z0-9._-])"))
    }
}

/// A taint as kubelet's `--register-with-taints` takes it: `key[=value]:Effect`.
pub fn taint(s: &str) -> Result<(), String> {
    let Some((kv, effect)) = s.rsplit_once(':') else {
        return Err(format!("{s:?} is not a taint (key[=value]:Effect)"));
    };
    if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
        return Err(format!(
            "{s:?}: effect {effect:?} is not NoSchedule, PreferNoSchedule or NoExecute"
        ));
    }
    let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
    label_key(key)
        .and_then(|()| label_value(value))
        .map_err(|e| format!("{s:?}: {e}"))
}

/// Text that must fit on one line of a generated file.
pub fn one_line(s: &str) -> Result<(), String> {
    if s.trim().is_empty() {
        Err("must not be empty".to_owned())
    } else if s.chars().any(|c| c.is_control()) {
        Err(format!("{s:?} contains a newline or control character"))
    } else {
        Ok(())
    }
}
