//! What a CoreDNS binary can do: its plugin list (`coredns -plugins`) and its
//! version (`coredns -version`), both asked of the binary itself.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use super::ArtifactError;
use crate::exec;

/// Plugins every LocalDNS Corefile relies on (docs/design.md §2), always required.
pub const BASELINE_PLUGINS: [&str; 8] = crate::names::PluginName::BASELINE;

/// The baseline plus the configured `RequiredPlugins` (trimmed, lower-cased),
/// without duplicates, baseline first.
pub fn required_plugins(configured: &[String]) -> Vec<String> {
    let mut all: Vec<String> = BASELINE_PLUGINS.iter().map(|p| p.to_string()).collect();
    for plugin in configured {
        let plugin = plugin.trim().to_ascii_lowercase();
        if !plugin.is_empty() && !all.contains(&plugin) {
            all.push(plugin);
        }
    }
    all
}

/// The DNS plugins in `coredns -plugins` output. Up to 1.12 it has sections
/// with lines like `  dns.cache` (only those count); since then it prints one
/// bare plugin name per line (`cache`).
pub fn parse_plugin_list(output: &str) -> BTreeSet<String> {
    let lines = output.lines().map(str::trim);
    if output.lines().any(|line| line.trim().starts_with("dns.")) {
        return lines
            .filter_map(|line| line.strip_prefix("dns."))
            .map(str::to_string)
            .collect();
    }
    lines
        .filter(|line| {
            line.starts_with(|c: char| c.is_ascii_lowercase())
                && line
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '-'))
        })
        .map(str::to_string)
        .collect()
}

/// Runs the freshly written candidate `binary` with `arg`.
///
/// Exec can fail with ETXTBSY for a moment after the file was written: a
/// child forked meanwhile by another thread briefly holds a copy of the
/// (close-on-exec) write descriptor until it execs. That is retried.
fn run_candidate(binary: &Path, arg: &str) -> Result<String, ArtifactError> {
    let mut tries = 0;
    loop {
        match exec::run_stdout(Command::new(binary).arg(arg)) {
            Err(exec::CommandFailed::Spawn { source, .. })
                if source.raw_os_error() == Some(nix::libc::ETXTBSY) && tries < 20 =>
            {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(25));
            }
            result => return Ok(result?),
        }
    }
}

/// Runs `<binary> -plugins` and fails on the first required plugin it lacks; returns every plugin
/// it listed.
pub fn check_required_plugins(binary: &Path, required: &[String]) -> Result<BTreeSet<String>, ArtifactError> {
    let output = run_candidate(binary, "-plugins")?;
    let listed = parse_plugin_list(&output);
    if listed.is_empty() {
        return Err(ArtifactError::BadBinary {
            binary: binary.to_path_buf(),
            reason: "`-plugins` listed no plugin; is this CoreDNS?".into(),
        });
    }
    match required.iter().find(|p| !listed.contains(p.as_str())) {
        Some(plugin) => Err(ArtifactError::MissingPlugin {
            plugin: plugin.clone(),
        }),
        None => Ok(listed),
    }
}

/// The version `<binary> -version` reports (`CoreDNS-1.15.0` gives `1.15.0`).
pub fn binary_version(binary: &Path) -> Result<String, ArtifactError> {
    let output = run_candidate(binary, "-version")?;
    output
        .lines()
        .find_map(|line| line.trim().strip_prefix("CoreDNS-"))
        .map(str::to_string)
        .ok_or_else(|| ArtifactError::BadBinary {
            binary: binary.to_path_buf(),
            reason: format!("`-version` printed no `CoreDNS-<version>` line: {output:?}"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bare_plugin_names_one_per_line_are_read() {
        let listed = parse_plugin_list("acl\nbind\ncache\nforward\non\n");
        assert!(listed.contains("cache") && listed.contains("bind") && !listed.contains(""));
        assert!(parse_plugin_list("Error: unknown flag\n").is_empty());
    }

    #[test]
    fn plugin_lines_are_read_from_the_other_plugins_section() {
        let out = "Server types:\n  dns\n\nCaddyfile loaders:\n  flag\n  default\n\nOther plugins:\n  dns.cache\n  dns.forward\n  on\n";
        let listed = parse_plugin_list(out);
        assert_eq!(listed.into_iter().collect::<Vec<_>>(), ["cache", "forward"]);
    }

    #[test]
    fn configured_plugins_are_normalised_and_added_after_the_baseline() {
        let all = required_plugins(&[" Health ".into(), "cache".into(), "log".into()]);
        assert_eq!(&all[..8], BASELINE_PLUGINS);
        assert_eq!(&all[8..], ["health", "log"]);
    }
}
